"""`mlcostd report` over a range: --until, and a snapshot or stopped store reported over its own
recorded range by default (issue 22, item 3): a file read an hour after it was taken used to say
"No samples in this window. Is mlcostd running?"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from tests.livedaemon import ROOT

HOUR = 3600.0


def record_past(db: Path, start: float, ticks: int = 30) -> None:
    """`ticks` 1 s samples of one busy GPU and its process from `start` (in the past)."""
    store = Store(str(db))
    for i in range(ticks):
        gpu = GpuSample(0, "GPU-0", "A100", utilization=90.0, power_watts=300.0,
                        memory_used_bytes=10 << 30, memory_total_bytes=40 << 30)
        proc = ProcessSample(pid=4242, start_time=start - 100, ppid=1, user="alice",
                             command="python train.py", gpus=(GpuUse(0, 10 << 30, 90.0),),
                             cpu_seconds=float(i), rss_bytes=1 << 30)
        store.write(Sample(ts=start + i, tick=i + 1, gpus=(gpu,), processes=(proc,)))
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                            "price": {"per_hour": 4.0, "gpus": 1, "source": "test"}})
    store.close()


def report(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_stopped_store_reports_its_own_range_without_since(tmp_path):
    db = tmp_path / "snap.db"
    start = time.time() - 2 * HOUR
    record_past(db, start)
    out = report(db, "--json")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["window"]["ticks"] == 30
    assert document["window"]["since"] <= start + 0.001
    assert abs(document["window"]["until"] - (start + 29)) < 0.01
    assert document["host"]["recording"] is False
    assert [p["pid"] for p in document["processes"]] == [4242]


def test_since_on_a_stopped_store_ends_at_its_last_sample(tmp_path):
    db = tmp_path / "snap.db"
    start = time.time() - HOUR
    record_past(db, start, ticks=30)
    document = json.loads(report(db, "--since", "10s", "--json").stdout)
    assert abs(document["window"]["until"] - (start + 29)) < 0.01
    assert document["window"]["ticks"] == 11  # start+19 .. start+29, both ends included


def test_until_ends_the_window_where_asked(tmp_path):
    db = tmp_path / "snap.db"
    start = time.time() - HOUR
    record_past(db, start, ticks=30)
    document = json.loads(report(db, "--since", "5s", "--until", f"{start + 9:.3f}",
                                 "--json").stdout)
    assert document["window"]["ticks"] == 6  # start+4 .. start+9
    assert abs(document["window"]["until"] - (start + 9)) < 0.01


def test_a_window_that_misses_the_file_names_the_files_range(tmp_path):
    db = tmp_path / "snap.db"
    start = time.time() - 3 * HOUR
    record_past(db, start)
    out = report(db, "--since", "5m", "--until", f"{start + 2 * HOUR:.0f}")
    assert out.returncode == 0, out.stderr
    assert "No samples in this window" in out.stdout
    assert str(db) in out.stdout and time.strftime(
        "%Y-%m-%d %H:%M", time.localtime(start)) in out.stdout
    assert "Is mlcostd running" not in out.stdout  # nothing records into a snapshot


def test_an_until_before_a_stopped_stores_range_reaches_back_an_hour_not_nowhere(tmp_path):
    """Probe 126 F12: `--until` before a stopped store's first record, without --since, gave a
    window of no length (since == until: "from T to T"); it reaches back the default hour, as
    a live store's does, and says what the file holds."""
    db = tmp_path / "snap.db"
    start = time.time() - 3 * HOUR
    record_past(db, start)
    until = round(start - HOUR)
    out = report(db, "--until", str(until), "--json")
    assert out.returncode == 0, out.stderr
    window = json.loads(out.stdout)["window"]
    assert (window["since"], window["until"]) == (until - HOUR, until), window
    text = report(db, "--until", str(until)).stdout
    assert "No samples in this window" in text and str(db) in text


def test_until_is_checked_like_since(tmp_path):
    db = tmp_path / "snap.db"
    record_past(db, time.time() - HOUR)
    # every refusal gives the forms to use ("in the future; give a past time" and "must be at
    # least 1 s" said none)
    forms = ("Unix seconds or an ISO 8601 time such as 2026-12-01T09:30 (local) or "
             "2026-12-01T09:30Z")
    for value, said in (("1969-12-31T00:00Z", "outside the times"),
                        ("yesterday", "not a time"),
                        (f"{time.time() + 86400:.0f}", "in the future"),
                        ("2030-01-01", "is in the future; give a past time: ")):
        out = report(db, "--until", value)
        assert out.returncode == 2
        assert out.stderr.startswith("mlcostd report: --until") and said in out.stderr
        assert out.stderr.rstrip().endswith(forms) and out.stderr.count("\n") == 1, out.stderr
    out = report(db, "--since", "0s")
    assert out.returncode == 2 and out.stderr == (
        "mlcostd report: --since '0s' must be at least 1 s; give a duration (ASCII digits and "
        "a unit, no spaces: e.g. 30s, 15m, 6h, 8d; a number alone is seconds)\n")


def test_a_snapshot_of_a_stopped_store_ends_at_its_last_sample(tmp_path):
    db = tmp_path / "old.db"
    start = time.time() - 3 * HOUR
    record_past(db, start)
    out = subprocess.run(
        [sys.executable, "-m", "daemon", "snapshot", "--db", str(db), "--since", "1m",
         "--socket", str(tmp_path / "no-daemon.sock"), "--out", str(tmp_path / "s.db"),
         "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ticks"] == 30
    assert abs(result["until"] - (start + 29)) < 0.01
    # and the snapshot reports its own range, without --since
    document = json.loads(report(tmp_path / "s.db", "--json").stdout)
    assert document["window"]["ticks"] == 30
    # --out a folder: into it, under the snapshot's own name (was: "is a directory")
    folder = tmp_path / "incidents"
    folder.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "daemon", "snapshot", "--db", str(db), "--since", "1m",
         "--socket", str(tmp_path / "no-daemon.sock"), "--out", str(folder), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (written,) = folder.iterdir()
    assert json.loads(out.stdout)["path"] == str(written)
    assert written.name.startswith("mlcost-") and written.name.endswith("-manual.db")


def test_a_young_stopped_store_is_reported_from_its_first_tick_not_its_rollups_hour(tmp_path):
    """A store that recorded 7 minutes from hh:57:38: its hour rollup starts at hh:00, and the
    report of it (no --since) covered an hour from hh:00, from the rollups: each process's
    reads and I/O wait read '-'. It covers the 7 minutes, from the raw samples."""
    db = tmp_path / "young.db"
    hour = (time.time() // HOUR - 2) * HOUR
    start = hour + 57 * 60 + 38
    store = Store(str(db))
    for i in range(420):
        gpu = GpuSample(0, "GPU-0", "A100", utilization=90.0, power_watts=300.0,
                        memory_used_bytes=10 << 30, memory_total_bytes=40 << 30)
        proc = ProcessSample(pid=4242, start_time=start - 100, ppid=1, user="alice",
                             command="python train.py", gpus=(GpuUse(0, 10 << 30, 90.0),),
                             cpu_seconds=float(i), rss_bytes=1 << 30,
                             read_bytes=i * (1 << 20))
        store.write(Sample(ts=start + i, tick=i + 1, gpus=(gpu,), processes=(proc,)))
    while store.maintain(0.5):  # the minute and hour rollups, as the daemon builds them
        pass
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                            "price": {"per_hour": 4.0, "gpus": 1, "source": "test"}})
    store.close()
    document = json.loads(report(db, "--json").stdout)
    window = document["window"]
    assert abs(window["since"] - start) < 0.01 and abs(window["until"] - (start + 419)) < 0.01
    assert abs(window["recorded"]["first"] - start) < 0.01
    assert window["source"] == "raw" and window["ticks"] == 420
    (proc,) = document["processes"]
    assert proc["read_bytes"] == 419 * (1 << 20)


def test_the_process_table_names_its_owner_column_workload_not_job(tmp_path):
    """Probe 141 L6: the process table's `job` column showed the owner workload ('-' for a
    process no pod, Slurm job or unit owns) while the report's "by job" lists job labels
    (`train.py`). The column says what it shows."""
    db = tmp_path / "snap.db"
    record_past(db, time.time() - HOUR)
    out = report(db)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = lines[lines.index("Processes (GPU processes and their workers)") + 1].split()
    assert header[-2:] == ["workload", "command"], header
    assert "job" not in header
    row = lines[lines.index("Processes (GPU processes and their workers)") + 2].split()
    assert row[0] == "4242" and row[-3] == "-", row  # no owner; its job label is train.py


def test_the_process_table_says_what_each_process_spent_in_the_window(tmp_path):
    """Probe 153 LOW 5: the text report's process table gave each process's burn ($/h) but not
    what it spent in the window, which the JSON has (`cost`) and a person reconciling a bill
    adds up. A `spent` column beside `$/h` shows it."""
    db = tmp_path / "snap.db"
    record_past(db, time.time() - HOUR, ticks=900)
    out = report(db)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("Processes (GPU processes and their workers)")
    header, row = lines[at + 1], lines[at + 2]
    (proc,) = json.loads(report(db, "--json").stdout)["processes"]
    assert proc["cost"] > 0.5  # 15 min at $4/h: about a dollar

    def column(name: str) -> str:  # the row's cell under the header's word
        return row[header.index(f" {name} ") + 1:].split()[0]

    assert header.split()[header.split().index("$/h") + 1] == "spent"
    assert column("spent") == f"${proc['cost']:,.2f}", (header, row)
    assert column("$/h") == f"${proc['burn_per_hour']:,.2f}", (header, row)


def test_until_shows_the_recommendations_as_they_stood_then(tmp_path):
    """Probe 151 F7: `report --until T` of the live store showed each recommendation as its
    row holds it now (the evaluation after T: other savings than a snapshot of the same range
    said), and one first seen after T. It shows the text the store kept at or before T, as
    mlcost-top's replay of T does; without --until, the latest as before."""
    from daemon.store import facts

    db = tmp_path / "live.db"
    start = time.time() - HOUR
    record_past(db, start, ticks=500)

    def rec(rid: str, savings: float, summary: str, seen: float) -> dict:
        return {"id": rid, "rule": "dataloader_starvation", "target": f"4242:{rid}",
                "summary": summary, "savings_per_month": savings, "first_seen": seen,
                "last_seen": seen, "evidence_seconds": 60.0}

    store = Store(str(db))
    facts.write_recommendations(store, [rec("r1", 100.0, "raise num_workers to 4", start + 100)],
                                start + 100)
    facts.write_recommendations(store, [rec("r1", 250.0, "raise num_workers to 8", start + 400),
                                        rec("r2", 50.0, "later advice", start + 400)],
                                start + 400)
    store.close()

    def shown(*args: str) -> dict[str, dict]:
        done = report(db, "--since", "5m", *args, "--json")
        assert done.returncode == 0, done.stderr
        return {r["id"]: r for r in json.loads(done.stdout)["recommendations"]}

    then = shown("--until", f"{start + 200:.3f}")
    assert set(then) == {"r1"}, then
    assert then["r1"]["savings_per_month"] == 100.0
    assert then["r1"]["summary"] == "raise num_workers to 4"
    # it stood from its text (start + 100) to T (seen again after): its evidence grew with it
    assert then["r1"]["evidence_seconds"] == pytest.approx(160.0, abs=0.01)
    later = shown("--until", f"{start + 450:.3f}")
    assert set(later) == {"r1", "r2"}
    assert later["r1"]["savings_per_month"] == 250.0
    latest = shown()
    assert latest["r1"]["summary"] == "raise num_workers to 8"
