"""Incident snapshots on a real `mlcostd run --simulate demo`: the idle-GPU trigger takes one
once the GPU has been held idle for [snapshots].held_idle_after (event and snapshot point to
each other); `mlcostd snapshot` through the API
and directly on --db; POST /v1/snapshots refuses bad input; a replay of the snapshot shows the
burn and recommendations the live view showed; the HTML renders in Chromium."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from daemon.client import ApiError
from daemon.replay import Replay
from tests import chromium
from tests.livedaemon import DEMO_CONFIG, ROOT
from tests.simhost import attach_code, host_toml, poll

TRIGGER_TIMEOUT_S = 240.0  # the event opens at ~10 s, the snapshot 5 s later; generous under load
# daemon/sim/simulate.toml's snapshot settings with the waits cut to the shortest the config
# allows: the idle-GPU trigger fires 10 s after the notebook's idle event opens (simulate.toml:
# a minute), the snapshot is taken 5 s later with the 2 minutes before it.
DEMO_SNAPSHOTS_CONFIG = {**DEMO_CONFIG, "snapshots": {
    "held_idle_after": "10s", "recommendation_savings": 0, "before": "2m", "after": "5s"}}
MLCOSTD = [sys.executable, "-m", "daemon.commands.cli"]


@pytest.fixture(scope="module")
def demo(mlcostd):
    return mlcostd("demo", config=DEMO_SNAPSHOTS_CONFIG)


def snapshot_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(MLCOSTD + ["snapshot", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)


# The built-in `faults` scenario's faults on four GPUs with a small busy workload each (what
# the workloads do is not what is tested): GPU 2 falls off the bus after the daemon's third tick,
# GPU 1 has no power reading, GPU 3's utilization call hangs past its deadline throughout.
FAULTS = """
[[faults]]
kind = "gpu_lost"
gpu = 2
at_tick = 3

[[faults]]
kind = "not_supported"
gpu = 1
calls = ["nvmlDeviceGetPowerUsage"]

[[faults]]
kind = "hang"
gpu = 3
call = "nvmlDeviceGetUtilizationRates"
seconds = 3.0
"""


def test_a_lost_gpu_and_a_timing_out_gpu_each_take_a_snapshot(mlcostd, tmp_path):
    """GPU 2 falls off the bus at tick 3, GPU 3's readings hang past their deadline: one
    incident snapshot each, saying which GPU and what happened. First in the module and stopped
    at its end: the module's demo host (0.2 CPU-s a second, its py-spy dumps aside) does not
    run on beside it."""
    busy = "dev.kernel(0.05, sm=0.6); time.sleep(0.05)"
    scenario = tmp_path / "faults.toml"
    scenario.write_text('name = "faults"\n' + host_toml(gpus=4, workloads=[
        {"name": f"train-{i}", "gpus": [i], "code": attach_code(i, 2, busy)} for i in range(4)],
        faults=FAULTS))
    daemon = mlcostd(str(scenario), interval=0.5, config={"snapshots": {
        "before": "1m", "after": "2s", "max_per_hour": 10, "held_idle_after": 0,
        "recommendation_savings": 0, "html": False,
        "gpu_timeout_after": "5s"}})  # (30 s by default) GPU 3 times out on most ticks of 5 s

    def gpu_incidents():
        listed = daemon.call("snapshots")["snapshots"]
        found = {s["trigger"]["target"]: s for s in listed
                 if (s.get("trigger") or {}).get("kind") == "gpu_lost"}
        return found if {"gpu:2", "gpu:3"} <= set(found) else None

    found = poll(gpu_incidents, 120, "incident snapshots of GPUs 2 and 3",
                 explain=daemon.log_tail)
    assert "GPU 2 is lost" in found["gpu:2"]["trigger"]["reason"]
    assert "GPU 3 readings time out" in found["gpu:3"]["trigger"]["reason"]
    assert found["gpu:3"]["trigger"]["status"] == "timeout"
    assert "gpu:0" not in found and "gpu:1" not in found  # healthy (or only NOT_SUPPORTED)
    with Replay(found["gpu:2"]["path"]) as replay:
        last = replay.state_at(replay.end)
        assert [g["status"] for g in last["gpus"] if g["index"] == 2] == ["lost"]
    assert daemon.stop() == 0, daemon.log_tail()


def test_the_idle_gpu_trigger_takes_a_snapshot_once_the_gpu_is_held_idle_long_enough(demo):
    def held_idle_snapshot():
        listed = demo.call("snapshots")["snapshots"]
        found = [s for s in listed if (s.get("trigger") or {}).get("kind") == "gpu_held_idle"
                 and s["html"]]  # its HTML report is written right after the file
        return found[0] if found else None

    taken = poll(held_idle_snapshot, TRIGGER_TIMEOUT_S, "an idle-GPU incident snapshot",
                 explain=demo.log_tail)
    path = Path(taken["path"])
    assert path.parent == demo.folder / "snapshots"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert Path(taken["html"]).exists()
    event = taken["trigger"]["event"]
    assert event["kind"] == "gpu_held_idle" and taken["trigger"]["reason"]
    # The event points back to its snapshot: live (/v1/now) and in the store.
    live = poll(lambda: [e for e in demo.now()["events"] if e["id"] == event["id"]
                         and e.get("snapshot")], 30, "the event's snapshot in /v1/now")
    assert live[0]["snapshot"] == str(path)

    def stored():
        conn = sqlite3.connect(f"file:{demo.db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT snapshot FROM events WHERE kind = ? AND target = ?",
                                (event["kind"], event["target"])).fetchone()
        finally:
            conn.close()
    assert poll(lambda: (row := stored()) and row[0], 30, "the event row's snapshot") == \
        str(path)
    with Replay(path) as replay:
        assert replay.snapshot is not None
        assert replay.snapshot["trigger"]["event"]["id"] == event["id"]
        # the range before the trigger is in it: from before the idle period began to past
        # held_idle_after (10 s) into it
        assert replay.start <= event["started_at"] + 1.0
        assert replay.end >= event["started_at"] + 10.0
    report = subprocess.run(MLCOSTD + ["report", "--db", str(demo.db), "--since", "10m"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert f"snapshot: {path}" in report.stdout


def test_snapshot_through_the_daemon_replays_what_the_live_view_showed(demo, tmp_path):
    poll(lambda: demo.now()["recommendations"], 120, "recommendations", explain=demo.log_tail)
    live = demo.now()
    out = tmp_path / "mine" / "incident.db"
    out.parent.mkdir()  # (--out never creates a folder: a typo must not make one as root)
    done = snapshot_cli("--since", "5m", "--html", "--socket", str(demo.socket),
                        "--db", str(demo.db), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "the daemon at unix:" in done.stdout and f"snapshot: {out}" in done.stdout
    html = out.with_suffix(".html")
    for file in (out, html):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    assert html.read_text().startswith("<!DOCTYPE html>")
    with Replay(out) as replay:
        assert replay.snapshot is not None and replay.snapshot["trigger"]["kind"] == "manual"
        shown = replay.state_at(live["ts"])
        assert shown["ts"] == pytest.approx(live["ts"], abs=0.002)
        assert shown["burn"]["total_per_hour"] == pytest.approx(
            live["burn"]["total_per_hour"], rel=1e-3)
        assert shown["burn"]["wasted_per_hour"] == pytest.approx(
            live["burn"]["wasted_per_hour"], rel=1e-2, abs=0.05)
        live_ids = {r["id"] for r in live["recommendations"]}
        assert live_ids and live_ids <= {r["id"] for r in shown["recommendations"]}


def test_the_html_of_the_demo_renders_every_gpu(demo, tmp_path):
    out = tmp_path / "demo.db"
    done = snapshot_cli("--since", "3m", "--html", "--socket", str(demo.socket), "--db",
                        str(demo.db), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    page = chromium.load(Path(result["html"]).as_uri(), chromium.CHARTS_SCRIPT,
                         screenshot=tmp_path / "demo.png")
    assert page.console_errors == []
    charts = {c["chart"]: c for c in page.value}
    assert len(charts["gpu-utilization"]["series"]) == 8  # the demo's 8 GPUs
    assert len(charts["gpu-memory"]["series"]) == 8
    assert [s["name"] for s in charts["burn"]["series"]] == ["burn $/h", "wasted $/h",
                                                             "no process $/h"]
    for chart in charts.values():
        assert all(s["drawn"] == s["declared"] > 0 for s in chart["series"]), chart


def test_snapshot_directly_on_the_database_when_no_daemon_answers(demo, tmp_path):
    out = tmp_path / "direct.db"
    done = snapshot_cli("--since", "2m", "--db", str(demo.db), "--socket",
                        str(tmp_path / "no-daemon.sock"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"directly from {demo.db}" in done.stdout
    with Replay(out) as replay:
        assert len(replay.times()) > 10


def test_snapshot_of_a_named_database_reads_it_not_the_running_daemons_store(demo, tmp_path):
    """With a daemon answering on [api].socket, `snapshot --db FILE` took the daemon's own
    store and said so only in its last line. The file named is the one read."""
    poll(lambda: demo.now()["tick"] >= 12, 120, "12 ticks", explain=demo.log_tail)
    other = tmp_path / "other.db"
    copied = snapshot_cli("--since", "2m", "--socket", str(demo.socket), "--out", str(other))
    assert copied.returncode == 0 and "the daemon at unix:" in copied.stdout, copied.stderr
    config = tmp_path / "mlcostd.toml"
    config.write_text(f"[api]\nsocket = {json.dumps(str(demo.socket))}\n")
    out = tmp_path / "of-other.db"
    done = snapshot_cli("--config", str(config), "--since", "2m", "--db", str(other), "--out",
                        str(out))
    assert done.returncode == 0, done.stderr
    assert f"directly from {other}" in done.stdout and "the daemon" not in done.stdout
    with Replay(out) as replay:
        assert len(replay.times()) > 10


def test_bad_snapshot_requests_get_a_400_that_names_the_value(demo):
    async def main() -> list[tuple[int, str]]:
        out = []
        connector = aiohttp.UnixConnector(path=str(demo.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            for body in ({"since": "soon"}, {"since": 0}, {"since": 10 * 86400},
                         {"html": "yes"}, {"upload": "http://bucket/x"},
                         {"until": "tomorrow"}, {"until": 4e9}):
                async with session.post("http://mlcostd/v1/snapshots", json=body) as r:
                    out.append((r.status, (await r.json())["error"]))
            for name in ("..%2Fmlcost.db", "mlcost.db", "x.txt"):
                async with session.get(f"http://mlcostd/v1/snapshots/{name}") as r:
                    out.append((r.status, (await r.json())["error"]))
        return out

    answers = asyncio.run(main())
    assert [status for status, _ in answers[:7]] == [400] * 7
    for (_, message), word in zip(answers[:7], ("soon", "0", "864000", "yes",
                                                     "http://bucket/x", "tomorrow", "4000000000"),
                                       strict=True):
        assert word in message, message
    assert all(status in (400, 404) for status, _ in answers[7:]), answers
    with pytest.raises(ApiError, match="s3://BUCKET/PREFIX"):
        demo.call("take_snapshot", 60, None, False, True)  # no [snapshots].upload configured
    assert not (demo.folder / "mlcost.db.html").exists()
    assert os.path.exists(demo.db)


def test_a_range_with_no_tick_gets_a_422_naming_what_the_store_holds_and_nothing_is_written(
        demo, tmp_path):
    """POST /v1/snapshots {"until": <a day ago>} answered "ticks": 0 and wrote the file, and
    `mlcostd snapshot --socket` printed it as taken. A 422 with the range the store holds, no
    file; `mlcostd snapshot` through the daemon exits 2 with the same words; the daemon runs
    on."""
    from daemon import clock

    demo.wait_for_ticks(3)
    folder = demo.folder / "snapshots"
    listed = sorted(os.listdir(folder)) if folder.exists() else []
    until = int(clock.now()) - 86400

    async def post() -> tuple[int, str]:
        connector = aiohttp.UnixConnector(path=str(demo.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post("http://mlcostd/v1/snapshots",
                                    json={"since": "2h", "until": until}) as r:
                return r.status, (await r.json())["error"]

    status, message = asyncio.run(post())
    assert status == 422, message
    assert f"no tick from {clock.local_time(until - 7200)} to {clock.local_time(until)}" \
        in message
    assert f"{demo.db} holds " in message, message
    out = tmp_path / "incident.db"
    done = snapshot_cli("--socket", str(demo.socket), "--since", "2h", "--until",
                        str(until), "--out", str(out))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and f"{demo.db} holds " in done.stderr, done.stderr
    assert not out.exists() and os.listdir(tmp_path) == []
    assert (sorted(os.listdir(folder)) if folder.exists() else []) == listed
    ticks = len(demo.ticks())
    demo.wait_for_ticks(ticks + 2)  # still recording
    assert demo.healthy()


def test_report_html_at_the_live_store_is_refused_and_the_store_stays_whole(demo):
    """`mlcostd report --db STORE --html STORE` on the store a daemon records into replaced it
    with the page: health still said ok, the store was then "malformed"."""
    demo.wait_for_ticks(3)
    done = subprocess.run(MLCOSTD + ["report", "--db", str(demo.db), "--since", "5m", "--html",
                                     str(demo.db)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"--html {demo.db} is the file the page is made from" in done.stderr
    with open(demo.db, "rb") as f:
        assert f.read(16) == b"SQLite format 3\x00"
    conn = sqlite3.connect(f"file:{demo.db}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    ticks = len(demo.ticks())
    demo.wait_for_ticks(ticks + 2)
    assert demo.healthy()
