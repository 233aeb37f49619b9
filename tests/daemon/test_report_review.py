"""The review a team signs off (issue 22 item 3): `mlcostd report --since 30d --by kind,job,user`
on a store holding 60 days of recorded hour spend, read from the rollups: spend per day and
month, the trend against the 30 days before, by kind, job and user, waste, and what became of
the recommendations (acted on, snoozed, ignored)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store import facts, queries, schema
from daemon.store.writer import Store
from daemon.wire import process_key
from tests.livedaemon import ROOT

DAY = 86400.0
TRAIN = ProcessSample(pid=100, start_time=1_780_000_000.0, ppid=1, user="alice",
                      command="python train.py --epochs 90", gpus=(GpuUse(0, 30 << 30, 90.0),))
SERVE = ProcessSample(pid=200, start_time=1_780_000_001.0, ppid=1, user="bob",
                      command="python -m vllm.entrypoints.openai.api_server",
                      gpus=(GpuUse(1, 20 << 30, 30.0),))


def build_store(db: Path) -> float:
    """60 days of hour spend as the daemon's ledger records it: in the last 30 days the trainer
    costs $2/h and the server $1/h, in the 30 before $1/h each; the host $0.50/h more with no
    process. Returns the store's last tick."""
    end = time.time() - 120
    end -= 180 if end % 3600 < 180 else 0  # a minute of its last hour before its ticks (below)
    store = Store(str(db))
    for i in range(3):  # the processes exist in the store, as after any tick
        gpus = tuple(GpuSample(g, f"GPU-{g}", "A100", utilization=60.0, power_watts=250.0,
                               memory_used_bytes=20 << 30, memory_total_bytes=40 << 30)
                     for g in range(2))
        store.write(Sample(ts=end - 2 + i, tick=i + 1, gpus=gpus, processes=(TRAIN, SERVE)))
    hosts, procs = {}, {}
    first = int((end - 60 * DAY) // 3600 * 3600)
    for hour in range(first, int(end) + 1, 3600):
        recent = hour + 3600 > end - 30 * DAY
        train = 2.0 if recent else 1.0
        part = min(1.0, (end - hour) / 3600)  # (the last hour: what was charged up to end)
        hosts[hour] = [3600.0 * part, (train + 1.5) * part, 0.5 * part, 1.0 * part, 0.0]
        procs[(hour, (TRAIN.pid, TRAIN.start_time))] = [3600.0 * part, train * part]
        procs[(hour, (SERVE.pid, SERVE.start_time))] = [3600.0 * part, 1.0 * part]
    facts.write_spend(store, hosts, procs)
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                            "price": {"per_hour": 4.0, "gpus": 2, "source": "test"}})
    store.set_meta("cost", {"jobs": {"llm-serve": "vllm"}})
    store.set_meta("kinds", {process_key(TRAIN.pid, TRAIN.start_time): {"kind": "training"},
                             process_key(SERVE.pid, SERVE.start_time): {"kind": "inference"}})
    seen = end - 5 * DAY
    recs = [{"id": f"r-{name}", "rule": "idle_gpu", "target": "100:1780000000.000",
             "summary": f"recommendation {name}", "savings_per_month": savings}
            for name, savings in (("acted", 900.0), ("snoozed", 500.0), ("ignored", 100.0))]
    facts.write_recommendations(store, recs, seen)
    facts.write_recommendations(store, [dict(recs[1], snoozed_until=end + DAY)], seen + 60)
    # raised an hour ago: new, not ignored
    facts.write_recommendations(store, [dict(recs[2], id="r-new", summary="recommendation new",
                                             savings_per_month=50.0)], end - 3600)
    facts.write_event(store, {"kind": "action", "target": "100:1780000000.000",
                              "started_at": seen + 30, "ended_at": seen + 30,
                              "cost_so_far": None, "detail": {
                                  "who": "uid 1000", "recommendation": "r-acted",
                                  "action": "sigterm", "dry_run": False, "outcome": "done"}})
    store.close()
    # Raw ticks for its last 3 s only, as raw retention leaves a store: its minute rollups
    # before them (so the last hour's spend is placed by them, not on those 3 ticks).
    conn = sqlite3.connect(db)
    with conn:
        last_hour = int((end - 2) // 3600 * 3600)
        conn.executemany(
            "INSERT OR IGNORE INTO rollups (res, bucket, kind, key, metric, n, sum, min, max) "
            "VALUES (?, ?, ?, 0, 0, 60, 36000, 600, 600)",
            [(schema.MINUTE, minute * 1000, schema.KIND_GPU)
             for minute in range(last_hour, int(end - 2) - 60, 60)])
    conn.close()
    return end


def report(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db),
                           "--since", "30d", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("review") / "mlcost.db"
    build_store(db)
    return db


def test_a_30_day_review_has_the_trend_against_the_30_days_before(store):
    out = report(store, "--json")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["window"]["source"] == "rollups"
    review = document["review"]
    spend = review["spend"]
    assert spend["total"] == pytest.approx(3.5 * 720, rel=1e-6)
    # (the hour the periods share is priced at the recent rate: within a dollar)
    assert spend["previous_total"] == pytest.approx(2.5 * 720, abs=1.0)
    assert spend["trend_pct"] == pytest.approx(40.0, abs=0.2)
    assert sum(spend["by_day"].values()) == pytest.approx(spend["total"], rel=1e-6)
    assert len(spend["by_day"]) in (30, 31)  # the window's ends cut two UTC days
    assert sum(spend["by_month"].values()) == pytest.approx(spend["total"], rel=1e-6)
    assert review["waste"]["wasted"] == pytest.approx(720.0, rel=1e-6)
    assert review["waste"]["wasted_share"] == pytest.approx(1 / 3.5, rel=1e-6)


def test_no_trend_against_a_period_before_that_was_hardly_recorded(tmp_path):
    """A store that began recording a day before the 30 days: the period before's spend is
    shown, but no trend against it (it would read as +2,800 %), and the text says why."""
    db = tmp_path / "young.db"
    end = build_store(db)
    conn = sqlite3.connect(db)  # the period before: only its last day stays recorded
    with conn:
        conn.execute("DELETE FROM rollups WHERE kind = ? AND bucket < ?",
                     (schema.KIND_SPEND, round((end - 31 * DAY) * 1000)))
    conn.close()
    out = report(db, "--json")
    assert out.returncode == 0, out.stderr
    review = json.loads(out.stdout)["review"]
    assert review["spend"]["previous_total"] == pytest.approx(2.5 * 24, abs=3.0)
    assert review["spend"]["trend_pct"] is None and review["waste"]["trend_pct"] is None
    assert all(row["trend_pct"] is None for row in review["by"]["job"])
    assert review["previous"]["recorded_s"] == pytest.approx(DAY, abs=3600)
    assert "no trend" in review["previous"]["trend"]
    text = report(db).stdout
    assert re.search(r"no trend: the period before was recorded for (2\d\.\d h|1 day), under "
                     r"half of the 30 days recorded in this one", text), text
    assert "%" not in text.split("spend $", 1)[1].split("\n", 1)[0]
    page = tmp_path / "review.html"  # the page says why too (it showed "-" alone)
    assert report(db, "--html", str(page)).returncode == 0
    assert re.search(r"trend</th><td class=n>.*\(no trend: the period before was recorded for "
                     r"(2\d\.\d h|1 day), under half", page.read_text())


def test_the_review_splits_by_kind_job_and_user_with_their_trends(store):
    review = json.loads(report(store, "--json").stdout)["review"]
    by = {key: {r["name"]: r for r in rows} for key, rows in review["by"].items()}
    assert set(by) == {"kind", "job", "user"}
    assert by["kind"]["training"]["cost"] == pytest.approx(1440.0, rel=1e-6)
    assert by["kind"]["training"]["trend_pct"] == pytest.approx(100.0, abs=0.5)
    assert by["kind"]["inference"]["trend_pct"] == pytest.approx(0.0, abs=0.5)
    # the job labels the daemon ran with ([cost].jobs, recorded in the store)
    assert set(by["job"]) == {"train.py", "llm-serve"}
    assert by["user"]["alice"]["previous"] == pytest.approx(720.0, abs=1.0)
    only_jobs = json.loads(report(store, "--json", "--by", "job").stdout)["review"]["by"]
    assert list(only_jobs) == ["job"]


def test_the_review_says_which_recommendations_were_acted_on_snoozed_ignored_or_new(store):
    outcomes = json.loads(report(store, "--json").stdout)["review"]["recommendations"]
    assert [r["id"] for r in outcomes["acted"]] == ["r-acted"]
    assert outcomes["acted"][0]["outcome"] == "done"
    assert [r["id"] for r in outcomes["snoozed"]] == ["r-snoozed"]
    assert [r["id"] for r in outcomes["ignored"]] == ["r-ignored"]
    assert [r["id"] for r in outcomes["new"]] == ["r-new"]


def test_the_review_reads_as_text(store):
    out = report(store)
    assert out.returncode == 0, out.stderr
    assert "Review:" in out.stdout
    assert re.search(r"spend \$2,520\.00 \(\$84\.00/day\); before: \$1,80\d\.\d\d "
                     r"\(\+(39\.9|40\.0)% on the period before\)", out.stdout), out.stdout
    assert "by kind: training $1,440.00 (+100%)" in out.stdout
    assert ("recommendations: 1 acted on, 1 snoozed, 1 ignored, 1 new (raised in the last day)"
            in out.stdout)
    assert "    new [$50/month] recommendation new" in out.stdout


def test_a_recommendation_with_no_saving_reads_alike_in_the_review_and_the_list(store):
    """Probe 126 F12: a budget's advice (no saving) read "new [$0/month]" in the review and
    "[no $ figure]" in the Recommendations section: the review says it as the list does."""
    from daemon.commands.report import render_review

    review = json.loads(report(store, "--json").stdout)["review"]
    review["recommendations"]["new"] = [
        {"id": "r-budget", "summary": "host spent $2.45 of its daily budget $2.45",
         "savings_per_month": 0.0},
        {"id": "r-none", "summary": "no figure at all", "savings_per_month": None}]
    text = "\n".join(render_review(review))
    assert "    new [no $ figure] host spent $2.45 of its daily budget $2.45" in text, text
    assert "    new [no $ figure] no figure at all" in text, text
    assert "$0/month" not in text


def test_by_names_what_it_cannot_split_by(store):
    out = report(store, "--by", "kind,colour")
    assert out.returncode == 2
    assert "--by 'kind,colour': use any of kind, job, user" in out.stderr


def test_a_young_live_stores_spend_per_day_counts_to_where_its_recorded_spend_reaches(tmp_path):
    """A live daemon hands the store its spend every round: two minutes into a store, the
    ticks reach two minutes and the spend 90 s. Per day counted to the last tick read
    $5.40/day for a $7.20/day host; counted to where the spend reaches (the store's
    spend_through), the host's rate."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    start, rate = hour + 600, 0.3  # $/h
    store = Store(str(db))
    gpus = (GpuSample(0, "GPU-0", "A100", utilization=60.0, memory_total_bytes=40 << 30),)
    for i in range(120):
        store.write(Sample(ts=start + i + 1, tick=i + 1, gpus=gpus, processes=(TRAIN,)))
    facts.write_spend(store, {hour: [90.0, rate / 3600 * 90, 0.0, 0.0, 0.0]},
                      {(hour, (TRAIN.pid, TRAIN.start_time)): [90.0, rate / 3600 * 90]})
    store.close()

    def per_day() -> dict:
        return json.loads(subprocess.run(
            [sys.executable, "-m", "daemon", "report", "--db", str(db), "--since", "30m",
             "--until", str(start + 120), "--json"], cwd=ROOT, capture_output=True, text=True,
            timeout=120, check=True).stdout)["review"]["spend"]

    unknown = per_day()  # a store from before spend_through: to the range's end, as before
    assert unknown["per_day_over_s"] == pytest.approx(119.0)
    store = Store(str(db))
    store.set_meta(queries.SPEND_THROUGH, start + 90)
    store.close()
    spend = per_day()
    # (the hour's ticks place its spend: the tick at the range's end is not inside it, and
    # the store's first tick charged nothing: 89 s of intervals)
    assert spend["total"] == pytest.approx(rate / 3600 * 89, rel=0.005)
    assert spend["per_day_over_s"] == pytest.approx(89.0)
    assert spend["per_day"] == pytest.approx(rate * 24, rel=0.02)  # was 0.75 of it
    assert unknown["per_day"] == pytest.approx(rate * 24 * 89 / 119, rel=0.02)
    # said, with where the spend reaches: the window's own spend, from its ticks, reaches on
    assert re.fullmatch(r"over the 89 s of spend the store holds \(to \d\d:\d\d:\d\d\)",
                        spend["per_day_basis"]), spend["per_day_basis"]
    assert unknown["per_day_basis"] == "over the 119 s the store holds"


def test_a_snapshot_taken_between_two_hand_overs_counts_the_ticks_after_it_too(tmp_path):
    """A 1-minute snapshot of a live store, taken 14 s after the spend's last hand-over: its
    hour row held 106 s of charges (46 of them in the snapshot's ticks), and the review placed
    60 ticks' worth of it in the window while counting its days over 46 s: $1,034/day for a
    $786/day host. The ticks after the hand-over are not in the row yet: charged from the
    ticks (they counted nothing: $0.455 for the $0.537 the window's 59 s cost)."""
    db = tmp_path / "snapshot.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    start, rate = hour + 600, 32.7726  # the live daemon started at start - 60
    store = Store(str(db))
    gpus = (GpuSample(0, "GPU-0", "A100", utilization=60.0, memory_total_bytes=40 << 30),)
    for i in range(60):  # the snapshot's ticks: start + 1 .. start + 60
        store.write(Sample(ts=start + i + 1, tick=i + 61, gpus=gpus, processes=(TRAIN,)))
    facts.write_spend(store, {hour: [106.0, rate / 3600 * 106, 0.0, 0.0, 0.0]},
                      {(hour, (TRAIN.pid, TRAIN.start_time)): [106.0, rate / 3600 * 106]})
    store.set_meta(queries.SPEND_THROUGH, start + 46)
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                            "price": {"per_hour": rate, "gpu_count": 1, "source": "test"}})
    store.close()
    spend = json.loads(subprocess.run(
        [sys.executable, "-m", "daemon", "report", "--db", str(db), "--json"], cwd=ROOT,
        capture_output=True, text=True, timeout=120, check=True).stdout)["review"]["spend"]
    assert spend["total"] == pytest.approx(rate / 3600 * 59, rel=0.03)  # was 46 s of it
    assert spend["per_day"] == pytest.approx(rate * 24, rel=0.03)  # was 1.33 times it
    assert spend["per_day_basis"] is None


def test_the_daemon_records_where_its_spend_reaches(mlcostd):
    """mlcostd writes spend_through with each round's spend (here: the round at its stop)."""
    from daemon.store.reader import StoreReader

    daemon = mlcostd("idle-host", args=["--no-stacks"])
    daemon.wait_for_ticks(2)
    assert daemon.stop() == 0
    reader = StoreReader(str(daemon.db))
    try:
        through = queries.spend_through(reader)
        last_tick = reader.latest()
    finally:
        reader.close()
    assert through is not None and last_tick is not None and through >= last_tick.ts


def test_the_review_as_an_html_page(store, tmp_path):
    page = tmp_path / "review.html"
    out = report(store, "--html", str(page))
    assert out.returncode == 0, out.stderr
    assert f"html: {page}" in out.stdout
    text = page.read_text()
    assert "default-src 'none'" in text and "<script" not in text
    assert 'data-chart="spend_by_day" data-bars="31"' in text or \
        'data-chart="spend_by_day" data-bars="30"' in text
    dates = text.count('<text x=')
    assert dates in (30, 31)  # each bar's date under it
    # and its dollars over it (probe 126 F12: bars alone, no axis, said no figure)
    values = re.findall(r'<text class="value"[^>]*>([^<]*)</text>', text)
    assert len(values) == dates and all(v.startswith("$") for v in values), values
    assert "$84.00" in values, values
    for said in ("By kind", "training", "llm-serve", "alice", "acted", "snoozed", "ignored",
                 "<td>new</td>", "recommendation new", "$2,520.00"):
        assert said in text
    assert page.stat().st_mode & 0o077 == 0  # a private file, as every file mlcostd writes


def test_an_hour_the_range_cuts_puts_its_spend_where_its_ticks_are(tmp_path):
    """A daemon that records from 10 minutes past an hour for 20 minutes: one hour spend row
    charged 1,200 s. The review of its last 5 minutes placed 5/60 of that row in them (a quarter
    of what they cost) and as much again in the 5 minutes before it, which were not recorded
    (a trend of +0.0 %); a snapshot's review did the same. The hour's raw ticks place it."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600  # a whole past hour
    start, ticks, rate = hour + 600, 1200, 7.2  # $/h: $0.002 a second
    early = ProcessSample(pid=300, start_time=1_780_000_002.0, ppid=1, user="carol",
                          command="python warmup.py", gpus=(GpuUse(1, 10 << 30, 50.0),))
    store = Store(str(db))
    gpus = tuple(GpuSample(g, f"GPU-{g}", "A100", utilization=60.0, power_watts=250.0,
                           memory_used_bytes=20 << 30, memory_total_bytes=40 << 30)
                 for g in range(2))
    for i in range(ticks):  # the warm-up holds GPU 1 for its first 10 minutes only
        store.write(Sample(ts=start + i + 1, tick=i + 1, gpus=gpus,
                           processes=(TRAIN, early) if i < 600 else (TRAIN,)))
    facts.write_spend(store, {hour: [ticks, rate / 3600 * ticks, 0.0, 0.0, 0.0]}, {
        (hour, (TRAIN.pid, TRAIN.start_time)): [ticks, 3.6 / 3600 * ticks],
        (hour, (early.pid, early.start_time)): [600.0, 3.6 / 3600 * 600]})
    store.close()

    review = json.loads(subprocess.run(
        [sys.executable, "-m", "daemon", "report", "--db", str(db), "--since", "5m", "--by",
         "job", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=True).stdout)["review"]
    assert review["spend"]["total"] == pytest.approx(rate / 3600 * 300, rel=0.01)  # was 1/4
    assert review["spend"]["previous_total"] == pytest.approx(rate / 3600 * 300, rel=0.01)
    assert review["spend"]["trend_pct"] == pytest.approx(0.0, abs=1.0)
    jobs = {row["name"]: row["cost"] for row in review["by"]["job"]}
    assert jobs == {"train.py": pytest.approx(3.6 / 3600 * 300, rel=0.01)}  # warm-up: before

    first = json.loads(subprocess.run(  # the first 5 minutes: nothing recorded before them
        [sys.executable, "-m", "daemon", "report", "--db", str(db), "--since", "5m", "--until",
         str(start + 300), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=True).stdout)["review"]
    assert first["spend"]["total"] == pytest.approx(rate / 3600 * 300, rel=0.01)
    assert first["spend"]["previous_total"] is None and first["spend"]["trend_pct"] is None
    # (was "the period before was recorded for 0.0 s, under half of the 5 min ...")
    assert first["previous"]["trend"] == "no trend: nothing was recorded in the period before"
    assert review["spend"]["per_day"] == pytest.approx(rate * 24, rel=0.01)
    assert review["spend"]["per_day_basis"] is None  # the store holds the whole window
    young = subprocess.run(  # 30 minutes that end 2 minutes after the store's first tick
        [sys.executable, "-m", "daemon", "report", "--db", str(db), "--since", "30m",
         "--until", str(start + 120)], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=True).stdout
    # per day of the 2 minutes recorded: was $0.24 / 30 min, "$11.52/day", for $172.80
    assert re.search(r"\(\$17[2-4]\.\d\d/day over the 119 s the store holds\)", young), young
    text = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                           "5m"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TZ="NYT+5")).stdout  # (POSIX: no tz database)
    assert "; 5 min), against the 5 min before" in text  # (was "(0.0 days)")
    # Local clock times say their zone, beside the UTC days money is booked to (probe 126 F1:
    # a window on 12-05 evening in New York whose spend was all on "12-06")
    zone = "NYT, UTC-05:00"
    assert re.search(rf"^window: .* \({zone}\), \d+ samples$", text, re.M), text
    assert re.search(rf"^Review: .* \({zone}; 5 min\)", text, re.M), text


def test_a_review_redirected_to_a_file_cuts_no_line(tmp_path):
    """README: "piped or redirected, no line is cut". The review's recommendation summaries
    and job names were cut with `…` at 90 and 60 characters even in a file (probe 84)."""
    db = tmp_path / "mlcost.db"
    end = build_store(db)
    summary = ("daemon.sim.workloads.data_starved (pid 12076) spends 62% of its last 15 s in "
               "data wait: prefetch batches with more DataLoader workers")
    store = Store(str(db))
    facts.write_recommendations(store, [{"id": "r-long", "rule": "dataloader_starvation",
                                         "target": "100:1780000000.000", "summary": summary,
                                         "savings_per_month": 1863.0}], end - 60)
    store.set_meta("cost", {"jobs": {"a-job-name-longer-than-sixty-characters-" * 2: "vllm"}})
    store.close()
    written = tmp_path / "report.txt"
    with written.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db),
                               "--since", "30d", "--by", "job"], cwd=ROOT, stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = written.read_text()
    assert f"    new [$1,863/month] {summary}\n" in text, text
    assert "a-job-name-longer-than-sixty-characters-" * 2 + " $" in text, text
    assert "…" not in text.split("Review:", 1)[1], text


def test_a_stopped_stores_whole_range_has_nothing_recorded_before_its_first_tick(mlcostd):
    """A run charges nothing before its first tick (README), so the period before a stopped
    store's whole range was not recorded at all; it read "before: $0.01 … recorded for 1 s"
    (the first tick, ending the period before, was counted as charging the second before it)."""
    daemon = mlcostd("idle-host", args=["--no-stacks"])
    daemon.wait_for_ticks(4)
    assert daemon.stop() == 0
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(daemon.db),
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["window"]["since"] == pytest.approx(document["window"]["recorded"]["first"],
                                                        abs=1e-3)
    review = document["review"]
    assert review["previous"]["recorded_s"] == 0.0, review["previous"]
    assert review["spend"]["previous_total"] in (None, 0.0), review["spend"]
    assert review["previous"]["trend"] == "no trend: nothing was recorded in the period before"
    # the range's own spend is what the ledger charged over its ticks
    assert review["spend"]["total"] == pytest.approx(document["spend"]["total"], rel=0.02)


def _record_runs(db: Path, runs: list[list[float]], rate: float, through: float, *,
                 maintained: bool = False, rates: tuple[float, ...] = (),
                 processes: tuple[tuple[ProcessSample, ...], ...] = (),
                 utilizations: tuple[float, ...] = (), power_watts: float | None = None) -> float:
    """A store written as the daemon writes it: each run (its ticks' times) recorded through
    the real writer, charged by its own CostLedger and handed over as hour spend, with its
    start and price readings (`rates`: each run's price per hour, else `rate`; `processes`:
    each run's, else the trainer; `utilizations`: its GPU's, else 90 %; `power_watts`: its
    GPU's power, else none read); the spend
    handed over up to `through`; `maintained`: its minutes rolled up by the writer's
    maintenance, as a running daemon's are. Returns the seconds the ledgers charged up to
    `through`."""
    from daemon.analysis.cost import HostPrice, burn
    from daemon.analysis.ledger import CostLedger
    from daemon.runtime import resume

    price = HostPrice(rate, 1, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "test", None)
    store = Store(str(db))
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0, "price": price.as_dict()})
    gpus = (GpuSample(0, "GPU-0", "A100", utilization=90.0, memory_used_bytes=30 << 30,
                      memory_total_bytes=40 << 30, power_watts=power_watts),)
    charged, tick = 0.0, 0
    for run, times in enumerate(runs):
        if rates:
            price = dataclasses.replace(price, per_hour=rates[run])
        if utilizations:
            gpus = (dataclasses.replace(gpus[0], utilization=utilizations[run]),)
        resume.record_start(store, times[0] - 1.5)
        resume.record_price(store, price, times[0] - 1.5)
        ledger = CostLedger()
        for ts in times:
            tick += 1
            sample = Sample(ts=ts, tick=tick, gpus=gpus,
                            processes=processes[run] if processes else (TRAIN,))
            store.write(sample)
            if ts <= through:
                charged += ledger.add(burn(sample, price))
        facts.write_spend(store, *ledger.take_unrecorded())
    store.set_meta(queries.SPEND_THROUGH, through)
    while maintained and store.maintain(budget_s=1.0):
        pass
    store.close()
    return charged


def test_a_run_that_began_in_a_minutes_last_second_has_nothing_recorded_before_it(tmp_path):
    """CI, 1 in 20 here: a stopped daemon's store whose first tick fell in the last second of
    a minute, the next one in the minute after. That minute's rollup, ending before the first
    tick that charged, read as raw ticks cut by retention, and the period before the store's
    whole range got the clock's share of its hour: "before: recorded for 0.0025 s"."""
    from daemon.analysis.recorded_spend import recorded_ledger
    from daemon.store.reader import StoreReader

    db = tmp_path / "mlcost.db"
    minute = int(time.time() // 3600 * 3600) - 2 * 3600 + 35 * 60
    run = [minute + 59.4 + i for i in range(4)]
    _record_runs(db, [run], 3.6, through=run[-1] + 0.02, maintained=True)
    with StoreReader(str(db)) as reader:
        assert reader.query("SELECT 1 FROM rollups WHERE res = ? AND bucket = ?",
                            (queries.MINUTE, minute * 1000))  # (the first tick's minute)
        before = recorded_ledger(reader, run[0] - 3.0, run[0] + 0.001, None)
        whole = recorded_ledger(reader, run[0] - 0.001, run[-1] + 0.001, None)
    assert before is None or before[0].seconds == 0.0, before and before[0].seconds
    assert whole is not None and whole[0].seconds == pytest.approx(3.0)


def test_the_review_and_the_reports_spend_are_the_same_dollars_across_an_hour_and_a_restart(
        tmp_path):
    """Two runs with a 15 s restart gap, the first ending just past an hour (probe 84's
    a.db): the ledger put the interval ending at 11:00:00.014 in 10:00's row (by its
    midpoint), and the review, counting 10:00's ticks by their own times, left it out:
    $5.990 against the $5.999 the rows held and price × time ran. The report's spend, a
    replay of every 3rd tick, charged nothing before and after the ticks it picked nor across
    the restart from the last it picked to the first: $5.972."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    rate = 32.7726
    first = [hour - 344 + i * 1.0003 for i in range(355)]  # to 11:00:10, past the hour
    second = [first[-1] + 15 + i * 1.0 for i in range(400)]  # 755 ticks: the replay samples
    charged = _record_runs(db, [first, second], rate, through=second[-1] + 0.5)
    assert charged == pytest.approx(first[-1] - first[0] + second[-1] - second[0], abs=1e-6)
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)  # its whole range: the ledger replayed over its ticks
    spend = document["review"]["spend"]["total"]
    assert spend == pytest.approx(rate / 3600 * charged, rel=1e-4)  # was 0.15 % short
    assert document["spend"]["total"] == pytest.approx(spend, rel=1e-4)  # was 0.3 % short
    assert document["spend"]["seconds"] == pytest.approx(charged, abs=1e-3)


BOBS = ProcessSample(pid=300, start_time=1_780_000_002.0, ppid=1, user="bob",
                     command="python eval.py", gpus=(GpuUse(0, 8 << 30, 30.0),))


@pytest.mark.parametrize("bob", [False, True])
@pytest.mark.parametrize(("since", "until"), [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)])
def test_an_hour_the_window_cuts_across_a_price_change_is_what_its_ticks_cost(tmp_path, since,
                                                                              until, bob):
    """Probe 126 F10: an hour holding a run at $32.77/h, 43 s down, then one at $55.06/h (a
    resize). A window of the first run's 3 minutes read $2.10 in the review beside the
    report's $1.63 (179 s x $32.77/h): the cut hour's dollars were placed by the seconds its
    ticks charged, not by what they cost. Windows cutting it on either side, or both."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    first = [hour + 600 + i * 1.0 for i in range(190)]
    second = [first[-1] + 43 + i * 1.0 for i in range(300)]
    # the trainer runs through the restart, or bob's job takes the GPU after it
    _record_runs(db, [first, second], 32.7726, through=second[-1] + 0.5,
                 rates=(32.7726, 55.06), processes=((TRAIN,), (BOBS,) if bob else (TRAIN,)))
    # the window's ends, on ticks (a tick at the window's start charged its interval in the
    # window before it, by the report's spend and the review alike): in run 1, its last tick,
    # in run 2, its last
    ends = [first[10], first[-1], second[150], second[-1]]
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                          str(ends[until] - ends[since]), "--until", str(ends[until]),
                          "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    # price x time between the window's ticks of each run (its first tick charges nothing)
    seconds = [sum(1 for t in run if ends[since] <= t <= ends[until]) for run in (first, second)]
    expected = (max(0, seconds[0] - 1) * 32.7726 + max(0, seconds[1] - 1) * 55.06) / 3600
    assert document["spend"]["total"] == pytest.approx(expected, rel=1e-3)
    assert document["review"]["spend"]["total"] == pytest.approx(expected, rel=1e-3)
    # and each user's: the trainer's across the change, or alice's at the first price and
    # bob's at the second
    by_user = {row["name"]: row["cost"] for row in document["review"]["by"]["user"]
               if row["cost"]}
    assert by_user == pytest.approx({user: cost for user, cost in
                                     document["spend"]["by_user"].items() if cost}, rel=1e-3)


def _key_paths(value: object, path: str = "") -> set[str]:
    """Every key of a JSON document, as a dotted path; a map keyed by data (`by_day`,
    `by_user`, ...: a day, a user) is one key, its entries its data."""
    if not isinstance(value, dict):
        return set()
    out = set()
    for key, child in value.items():
        out.add(f"{path}.{key}")
        if not key.startswith("by_"):
            out |= _key_paths(child, f"{path}.{key}")
    return out


def test_a_window_with_no_tick_has_every_key_a_full_one_has(tmp_path):
    """Probe 126 F8: the keys of `report --json` are a contract, but a window with no tick (the
    night the recorder was down) left out spend.total and the rest of spend, burn's
    price_per_hour and price_per_gpu, and the review's spend, waste, storage, by and
    unit_costs: `d["spend"]["total"]` was a KeyError. The same keys, null or 0; and a file
    with nothing recorded at all has them too."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    run = [hour + 600 + i * 1.0 for i in range(120)]
    _record_runs(db, [run], 32.7726, through=run[-1] + 0.5)

    def document(path: Path, *args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(path),
                              "--json", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    full = document(db)
    empty = document(db, "--since", "10m", "--until", str(run[0] - 3600))
    assert full["spend"]["total"] > 0 and full["review"]["spend"]["total"] > 0
    assert empty["window"]["ticks"] == 0
    missing, extra = _key_paths(full) - _key_paths(empty), _key_paths(empty) - _key_paths(full)
    assert not extra and missing <= {".host.instance." + key for key in (
        "provider", "type", "region", "lifecycle", "source")}, (missing, extra)
    assert empty["host"]["instance"] is None  # (no price recorded before the window)
    assert empty["spend"]["total"] == 0 and empty["burn"]["price_per_hour"] == 32.7726
    assert empty["review"]["spend"]["total"] is None and empty["review"]["waste"]["wasted"] is None
    assert set(empty["review"]["by"]) == {"kind", "job", "user"}
    text = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                           "10m", "--until", str(run[0] - 3600)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    nothing = tmp_path / "nothing.db"
    Store(str(nothing)).close()
    bare = document(nothing)
    for key in ("spend", "burn", "review"):
        assert _key_paths(bare[key]) >= _key_paths(full[key]) - {".managed"}, key
    assert _key_paths(bare["host"]) >= {".hostname", ".instance", ".price", ".interval_s"}


@pytest.mark.parametrize(("since", "until"), [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)])
def test_an_hour_the_window_cuts_has_the_idle_and_waste_its_ticks_charged(tmp_path, since,
                                                                          until):
    """Probe 126 (F10's waste): an hour holding a trainer at 30 % of its GPU (70 % of the
    price wasted), 43 s down, then a run whose GPU nobody holds at 90 % (all idle, 10 %
    wasted). A window of the first run's 3 minutes read a waste share of 0.53 in the review
    (the hour's) beside the report's 0.70: the cut hour's idle and waste were placed by what
    its ticks charged in all, not by what they idled and wasted. Windows cutting it on either
    side, or both; at one price, and at two (a resize between the runs)."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    first = [hour + 600 + i * 1.0 for i in range(190)]
    second = [first[-1] + 43 + i * 1.0 for i in range(300)]
    for rates in ((32.7726, 32.7726), (32.7726, 55.06)):
        if db.exists():
            db.unlink()
        _record_runs(db, [first, second], rates[0], through=second[-1] + 0.5, rates=rates,
                     processes=((TRAIN,), ()), utilizations=(30.0, 90.0))
        ends = [first[10], first[-1], second[150], second[-1]]  # as the test above
        out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db),
                              "--since", str(ends[until] - ends[since]), "--until",
                              str(ends[until]), "--json"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        document = json.loads(out.stdout)
        seconds = [max(0, sum(1 for t in run if ends[since] <= t <= ends[until]) - 1)
                   for run in (first, second)]
        dollars = [s * rate / 3600 for s, rate in zip(seconds, rates, strict=True)]
        wasted, idle = 0.7 * dollars[0] + 0.1 * dollars[1], dollars[1]
        for figures in (document["spend"], document["review"]["waste"]):
            assert figures["wasted"] == pytest.approx(wasted, rel=1e-3), (rates, figures)
            assert figures["idle"] == pytest.approx(idle, rel=1e-3, abs=1e-6), (rates, figures)
        assert document["review"]["waste"]["wasted_share"] == pytest.approx(
            wasted / sum(dollars), rel=1e-3)


def test_a_snapshot_cut_mid_run_between_two_hand_overs_is_the_dollars_its_ticks_cost(tmp_path):
    """Probe 84's direct.db: a minute's snapshot of a run that began before it, taken 9 s after
    the spend's last hand-over. The review read $0.455 (the 50 s handed over) beside the
    report's $0.537 (its 59 s of ticks, replayed): price × time ran is the 59 s."""
    from daemon.store.snapshot import write_snapshot

    db, out = tmp_path / "mlcost.db", tmp_path / "snapshot.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    rate = 32.7726
    run = [hour + 600 + i * 1.0 for i in range(80)]  # the snapshot: its last 60 ticks
    _record_runs(db, [run], rate, through=run[-10] + 0.05)
    write_snapshot(db, out, run[20] - 0.1, run[-1] + 0.5)
    result = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(out),
                             "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    spend = document["review"]["spend"]
    assert document["window"]["ticks"] == 60
    assert spend["total"] == pytest.approx(rate / 3600 * 59, rel=1e-3)  # was 50 s of it
    assert document["spend"]["total"] == pytest.approx(spend["total"], rel=1e-3)
    assert spend["per_day"] == pytest.approx(rate * 24, rel=1e-3)
    assert spend["per_day_basis"] is None


HELPER = ProcessSample(pid=400, start_time=1_780_000_003.0, ppid=1, user="dave",
                       command="python -m vllm.entrypoints.openai.api_server --tp 2",
                       gpus=(GpuUse(2, 10 << 30, 40.0), GpuUse(3, 10 << 30, 40.0)))


@pytest.fixture(scope="module")
def edge_store(tmp_path_factory) -> tuple[Path, list[tuple[float, float, dict[str, float]]]]:
    """A store written as the daemon writes it, 2.5 hours of 2 s ticks off the hour through
    the real writer and its maintenance, each run charged by its own CostLedger and handed over
    every 10 minutes: the trainer holds GPU 0 throughout, the server GPU 1 from 0:40 to 1:50,
    a 2-GPU server GPUs 2 and 3 from 1:10 to 2:20, and the daemon restarts at 1:25 after 30 s
    down. Returns it and, after each tick, what the ledgers had charged in all (dollars, and by
    user): a range's spend, tick by tick, is the difference between its ends."""
    from daemon.analysis.cost import HostPrice, burn
    from daemon.analysis.ledger import CostLedger
    from daemon.runtime import resume

    db = tmp_path_factory.mktemp("edges") / "mlcost.db"
    price = HostPrice(4 * 7.2, 4, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "test", None)
    first = int(time.time() // 3600 * 3600) - 4 * 3600 + 1234.25  # (a whole past span)
    gpus = tuple(GpuSample(g, f"GPU-{g}", "A100", utilization=90.0, memory_used_bytes=30 << 30,
                           memory_total_bytes=40 << 30) for g in range(4))
    store = Store(str(db))
    store.set_meta("host", {"hostname": "box", "interval_s": 2.0, "price": price.as_dict()})
    charged: list[tuple[float, float, dict[str, float]]] = []
    total, by_user = 0.0, dict[str, float]()
    ledger: CostLedger | None = None
    tick, ts = 0, first
    while ts < first + 2.5 * 3600:
        at = ts - first
        if ledger is None or 85 * 60 <= at < 85 * 60 + 2:
            if ledger is not None:  # the restart: handed over, then 30 s down
                facts.write_spend(store, *ledger.take_unrecorded())
                ts += 30.0
            resume.record_start(store, ts - 1.5)
            resume.record_price(store, price, ts - 1.5)
            ledger = CostLedger()
        processes = (TRAIN, *((SERVE,) if 40 * 60 <= at < 110 * 60 else ()),
                     *((HELPER,) if 70 * 60 <= at < 140 * 60 else ()))
        tick += 1
        sample = Sample(ts=ts, tick=tick, gpus=gpus, processes=processes)
        store.write(sample)
        before = dict(ledger.by_user), ledger.total
        ledger.add(burn(sample, price))
        total += ledger.total - before[1]
        for user, cost in ledger.by_user.items():
            by_user[user] = by_user.get(user, 0.0) + cost - before[0].get(user, 0.0)
        charged.append((ts, total, dict(by_user)))
        if tick % 300 == 0:
            facts.write_spend(store, *ledger.take_unrecorded())
            store.set_meta(queries.SPEND_THROUGH, ts)
            while store.maintain(budget_s=1.0):
                pass
        ts += 2.0
    assert ledger is not None
    facts.write_spend(store, *ledger.take_unrecorded())
    store.set_meta(queries.SPEND_THROUGH, charged[-1][0])
    store.close()
    return db, charged


def _charged_over(charged: list[tuple[float, float, dict[str, float]]], since: float,
                  until: float) -> tuple[float, dict[str, float]]:
    """What the ledgers charged over the ticks in (since, until]: dollars, and by user."""
    def at(when: float) -> tuple[float, dict[str, float]]:
        done = [(total, users) for ts, total, users in charged if ts <= when]
        return done[-1] if done else (0.0, {})

    (end_total, end_users), (start_total, start_users) = at(until), at(since)
    return end_total - start_total, {user: cost - start_users.get(user, 0.0)
                                     for user, cost in end_users.items()
                                     if cost - start_users.get(user, 0.0) > 0}


@pytest.mark.parametrize(("since", "before_end"), [
    ("1h", 0.0), ("1h", 1500.5), ("30m", 2222.0), ("90m", 600.25), ("45m", 3334.0)])
def test_a_sub_day_reviews_spend_is_what_the_ledger_charged_its_ticks(edge_store, since,
                                                                      before_end):
    """A range shorter than a day, on or off the hour: its edge hours are placed by their
    ticks (queries.spend_by_day), so the review's spend and its split by user, and the same
    for the period before it, are what the ledgers charged the ticks inside them, restart and
    2-GPU process included (issue 23: the edge hours were read four times as slowly)."""
    db, charged = edge_store
    until = charged[-1][0] - before_end
    span = {"1h": 3600, "30m": 1800, "90m": 5400, "45m": 2700}[since]
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                          since, "--until", str(until), "--by", "user", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    review = json.loads(out.stdout)["review"]
    total, users = _charged_over(charged, until - span, until)
    before, before_users = _charged_over(charged, until - 2 * span, until - span)
    assert total > 0 and before > 0
    assert review["spend"]["total"] == pytest.approx(total, abs=1e-4)
    assert review["spend"]["previous_total"] == pytest.approx(before, abs=1e-4)
    by_user = {row["name"]: row for row in review["by"]["user"]}
    assert {name: row["cost"] for name, row in by_user.items() if row["cost"]} == pytest.approx(
        users, abs=1e-4)
    assert {name: row["previous"] for name, row in by_user.items() if row["previous"]} == \
        pytest.approx(before_users, abs=1e-4)


def test_a_process_id_no_process_has_in_an_edge_hour_is_no_process(edge_store, tmp_path):
    """A store is anyone's file: a GPU sample whose process id is a blob, a text that reads as
    a list of ids, or a fraction, at ticks of an hour the range cuts, is no process's; the
    review's figures stay what the ledgers charged (the edge hour's processes are read as JSON,
    which cannot hold a blob)."""
    db, charged = edge_store
    copy = tmp_path / "edited.db"
    shutil.copy(db, copy)
    until = charged[-1][0] - 1500.5
    conn = sqlite3.connect(copy)
    with conn:
        ticks = [ts for ts, in conn.execute(
            "SELECT ts FROM ticks WHERE ts > ? ORDER BY ts LIMIT 5",
            (round((until - 3600) * 1000),))]
        conn.executemany("INSERT INTO proc_gpu_samples (ts, proc, gpu, mem, sm) "
                         "VALUES (?, ?, 0, 1, 1)", [
                             (ts, value) for ts in ticks
                             for value in (b"\x01", "1,2,3", 2.5)])
    conn.close()
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(copy),
                          "--since", "1h", "--until", str(until), "--by", "user", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    review = json.loads(out.stdout)["review"]
    total, users = _charged_over(charged, until - 3600, until)
    assert review["spend"]["total"] == pytest.approx(total, abs=1e-4)
    assert {row["name"]: row["cost"] for row in review["by"]["user"] if row["cost"]} == \
        pytest.approx(users, abs=1e-4)


def _late_ticks(db: Path) -> int:
    """Ticks written into minutes already rolled up, as a write retried after maintenance ran
    would be: half a second after six ticks that three processes held a GPU at, held by one.
    Returns how many."""
    conn = sqlite3.connect(db)
    with conn:
        done = conn.execute("SELECT value FROM meta WHERE key = 'minute_done'").fetchone()[0]
        held = [ts for ts, in conn.execute(
            "SELECT ts FROM proc_gpu_samples GROUP BY ts HAVING count(DISTINCT proc) = 3 "
            "ORDER BY ts") if ts < done - 120_000][::97][:6]
        for ts in held:
            conn.execute("INSERT INTO ticks (ts, tick, nvml_status, n_gpus, n_processes) "
                         "SELECT ?, tick + 100000, nvml_status, n_gpus, 1 FROM ticks "
                         "WHERE ts = ?", (ts + 500, ts))
            conn.execute("INSERT INTO proc_gpu_samples (ts, proc, gpu, mem, sm) SELECT ?, proc, "
                         "gpu, mem, sm FROM proc_gpu_samples WHERE ts = ? AND proc = (SELECT "
                         "min(proc) FROM proc_gpu_samples WHERE ts = ?)", (ts + 500, ts, ts))
    conn.close()
    return len(held)


def test_minutes_their_rollups_vouch_for_place_the_same_spend_as_their_ticks(
        edge_store, tmp_path, monkeypatch):
    """An edge hour's minutes at each tick of which every process held a GPU are read from
    their minute rollups rather than tick by tick (queries._held_throughout); the spend they
    place is what their ticks place, to the microdollar: on the store, on a snapshot of it cut
    mid-minute at both ends, and where ticks were written into minutes already rolled up."""
    from daemon.store.reader import StoreReader
    from daemon.store.snapshot import write_snapshot

    db, charged = edge_store
    first, last = charged[0][0], charged[-1][0]
    cut = tmp_path / "snapshot.db"
    write_snapshot(db, cut, first + 1500.123, last - 1234.567)
    late = tmp_path / "late.db"
    shutil.copy(db, late)
    assert _late_ticks(late) == 6
    ranges = [(first + offset, first + offset + span) for offset in range(300, 8000, 611)
              for span in (600.5, 1800, 3600, 5400)]
    vouched = []
    real = queries._held_throughout

    def counted(*args):
        found = real(*args)
        vouched.append(len(found))
        return found

    for store in (db, cut, late):
        reader = StoreReader(str(store))
        try:
            monkeypatch.setattr(queries, "_held_throughout", counted)
            fast = [queries.spend_by_day(reader, a, b) for a, b in ranges]
            monkeypatch.setattr(queries, "_held_throughout", lambda *args: set())
            assert [queries.spend_by_day(reader, a, b) for a, b in ranges] == fast, store
        finally:
            reader.close()
        assert sum(vouched) > 100, store  # (the rollups did vouch for minutes)
        vouched.clear()


def test_the_pages_detail_column_shows_only_where_a_recommendation_has_one():
    """An action's outcome or a snooze's end goes in the detail column; a review of new
    recommendations alone had the column empty all the way down (probe 149 L5)."""
    from daemon.report_html.review import render

    new = {"id": "r-new", "summary": "pid 7 holds GPU 3 idle", "savings_per_month": 2990.0}
    page = render({"host": {"hostname": "vm"}, "review": {"recommendations": {"new": [new]}}})
    assert "<th>detail</th>" not in page and "pid 7 holds GPU 3 idle" in page
    assert page.count("<td") == page.count("</td>") == 3 and "<td></td>" not in page
    acted = {"id": "r-acted", "summary": "stop pid 8", "outcome": "done",
             "savings_per_month": 900.0}
    page = render({"host": {"hostname": "vm"},
                   "review": {"recommendations": {"acted": [acted], "new": [new]}}})
    assert "<th>detail</th>" in page and "<td>done</td>" in page
    assert page.count("<tr>") == 3  # the heading and the two rows, each with its four cells
    assert page.count("<td") == 8


@pytest.mark.parametrize("since", ["20m", "3h", "6h", "7h", "2d"])
def test_a_stall_inside_a_run_is_charged_as_the_ledger_charged_it(tmp_path, since):
    """Probe 153 H1: the daemon SIGSTOPped for 105 s mid-run. Its ledger charged the stall's
    first minute and left 45 s unaccounted; a 3 h report, replaying an even spread of the ticks
    with its gap cap widened to 3 sampling steps (216 s), charged the whole stall: $0.072 more
    than the ledger, the review and README (and a sampled-out tick beside the stall moved 1 s
    from charged to unaccounted at 20 minutes). Beyond 6 h (read from the hour spend rows) the
    same dollars, and the 45 s unaccounted where it read 0: the rows did not keep them."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 3 * 3600
    rate = 5.672
    run = [hour + 600 + i * 1.0 for i in range(300)]
    run += [run[-1] + 105.7 + i * 1.0 for i in range(300)]
    charged = _record_runs(db, [run], rate, through=run[-1] + 0.5, maintained=True,
                           power_watts=300.0)
    assert charged == pytest.approx(598 + 60.0)
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                          since, "--until", str(run[-1] + 0.5), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    spend = document["spend"]
    assert spend["seconds"] == pytest.approx(charged, abs=1e-3)
    assert spend["unaccounted_seconds"] == pytest.approx(45.7, abs=1e-3)
    assert spend["total"] == pytest.approx(rate / 3600 * charged, rel=1e-6)
    assert document["review"]["spend"]["total"] == pytest.approx(spend["total"], rel=1e-5)
    if since in ("20m", "3h", "6h"):  # (from the ticks; beyond, their even spread alone)
        # the energy counts the seconds the spend charged: a 3 h window counted the whole
        # stall (the spread's widened cap) and left out its first tick's second
        carbon = document["carbon"]
        assert carbon["covered_s"] == pytest.approx(spend["seconds"], abs=1e-3)
        assert carbon["joules"] == pytest.approx(300.0 * carbon["covered_s"], rel=1e-6)


def test_a_stall_across_hours_is_unaccounted_in_every_report_that_holds_it(tmp_path):
    """A daemon stopped (SIGSTOP, a suspended VM) for 2 h 20 min inside a run: its ledger
    charged the stall's first minute and left the rest unaccounted. A report read from the hour
    spend rows (`--since 2d`, `12h`) said 0 unaccounted, the 6 h one (the ticks) 8,340 s; all
    say it now, and the same seconds charged."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 5 * 3600
    run = [hour + 600 + i * 1.0 for i in range(300)]
    run += [run[-1] + 8400.0 + i * 1.0 for i in range(300)]
    charged = _record_runs(db, [run], 5.672, through=run[-1] + 0.5, maintained=True)
    assert charged == pytest.approx(598 + 60.0)
    for since in ("6h", "12h", "2d"):
        out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db),
                              "--since", since, "--until", str(run[-1] + 0.5), "--json"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        spend = json.loads(out.stdout)["spend"]
        assert spend["seconds"] == pytest.approx(charged, abs=1e-3), since
        assert spend["unaccounted_seconds"] == pytest.approx(8400 - 60, abs=1e-3), since


def test_adjacent_windows_add_up_to_their_union_and_each_is_its_reviews_spend(tmp_path):
    """Probe 153 M2: a window's spend charged its ticks from the first one it held, so each
    window left out its first tick's interval: two adjacent 20 s windows of 1 s ticks read
    19 s each ($0.029929 + $0.029926) against their union's 39 s ($0.061431), and the review
    (each tick charged the interval before it) read 20 s. The window across a restart charges
    nothing across it, nor the run's first tick."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 2 * 3600
    rate = 5.672
    first = [hour + 600 + i * 1.0 for i in range(100)]
    second = [first[-1] + 81.0 + i * 1.0 for i in range(100)]
    _record_runs(db, [first, second], rate, through=second[-1] + 0.5)

    def spend(since: float, until: float) -> tuple[float, float, float]:
        out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db),
                              "--since", str(until - since), "--until", str(until), "--json"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        document = json.loads(out.stdout)
        return (document["spend"]["total"], document["spend"]["seconds"],
                document["review"]["spend"]["total"])

    middle = first[40] + 0.5  # (off the ticks: each window cuts a tick's interval)
    a, b, union = spend(middle - 20, middle), spend(middle, middle + 20), spend(middle - 20,
                                                                                middle + 20)
    assert a[1] == pytest.approx(20.0) and b[1] == pytest.approx(20.0)  # were 19
    assert a[0] + b[0] == pytest.approx(union[0], rel=1e-6)
    assert a[0] == pytest.approx(rate / 3600 * 20, rel=1e-6)
    for total, _, review in (a, b, union):
        assert total == pytest.approx(review, rel=1e-5)
    # across the restart: the first run's last 10 s and the second's first 9 (its first tick
    # charged nothing), not the 81 s between
    across = spend(first[-1] - 9.5, second[9] + 0.5)
    assert across[1] == pytest.approx(19.0)
    assert across[0] == pytest.approx(across[2], rel=1e-5)


def test_the_seconds_of_an_hour_cut_across_a_price_change_are_its_ticks_time(tmp_path):
    """Probe 153 M3: an hour that ran at $5.672/h, then $10/h, then $5.672/h again; a window
    over 7 h (read from the recorded hour spend) ending after the $10/h run. Its dollars were
    right, but the hour's seconds were placed by the same price-weighted share as its dollars:
    238 s for the 198 s its ticks charged, and burn.total_per_hour $6.52 for $7.84."""
    db = tmp_path / "mlcost.db"
    hour = int(time.time() // 3600 * 3600) - 3 * 3600
    first = [hour + 600 + i * 1.0 for i in range(100)]
    second = [first[-1] + 81.0 + i * 1.0 for i in range(100)]
    third = [second[-1] + 35.0 + i * 1.0 for i in range(200)]
    _record_runs(db, [first, second, third], 5.672, through=third[-1] + 0.5,
                 rates=(5.672, 10.0, 5.672))
    until = second[-1] + 0.5
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                          "7h", "--until", str(until), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["window"]["source"] == "rollups"
    dollars = (99 * 5.672 + 99 * 10.0) / 3600
    assert document["spend"]["total"] == pytest.approx(dollars, rel=1e-5)
    assert document["spend"]["seconds"] == pytest.approx(198.0, abs=1e-3)  # was 231
    assert document["burn"]["total_per_hour"] == pytest.approx(dollars / 198.0 * 3600, rel=1e-5)
