"""What /v1/now knows, `mlcostd report --json` knows (issue 22 item 3, issue 25 item 5): with
[cost].jobs, a [[cost.unit_costs]] counter and a storage path configured, the report gave
`by_job` keyed by module names, `unit_costs: []` and `storage_items: []` while /v1/now showed
the job, the unit cost and the storage item. A live daemon on the simulated host, a real aiohttp
server exporting a Prometheus counter, and the report read from the daemon's store."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.livedaemon import ROOT, poll, start

TOKENS_PER_S = 5000.0


@pytest.fixture
def counter_url() -> Iterator[str]:
    """A real aiohttp server on 127.0.0.1 whose /metrics counts tokens at a steady rate."""
    started = time.monotonic()
    ready = threading.Event()
    state: dict[str, object] = {}

    async def metrics(_: web.Request) -> web.Response:
        count = (time.monotonic() - started) * TOKENS_PER_S
        return web.Response(text=f"# TYPE tokens counter\ntokens_total {count:.0f}\n")

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["port"] = runner.addresses[0][1]
        state["stop"] = stop = asyncio.Event()
        ready.set()
        await stop.wait()
        await runner.cleanup()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    yield f"http://127.0.0.1:{state['port']}/metrics"
    loop.call_soon_threadsafe(state["stop"].set)  # type: ignore[attr-defined]
    thread.join(30)


def write_config(folder: Path, url: str, storage: Path) -> Path:
    path = folder / "parity.toml"
    path.write_text(f"""
[idle]
gpu_held_after = "1m"
[cost]
evaluate_every = "5s"
jobs = {{ notebook-job = "idle_notebook" }}
storage_paths = [{json.dumps(str(storage))}]
[[cost.unit_costs]]
target = "notebook-job"
url = {json.dumps(url)}
metric = "tokens"
""")
    return path


def test_the_report_prices_jobs_unit_costs_and_storage_as_v1_now_does(tmp_path, counter_url):
    storage = tmp_path / "checkpoints"
    storage.mkdir()
    (storage / "step-100.pt").write_bytes(b"x" * (3 << 20))
    folder = tmp_path / "daemon"
    folder.mkdir()
    config = write_config(folder, counter_url, storage)
    daemon = start(folder, "idle-host", args=["--config", str(config)])
    try:
        def priced() -> dict | None:
            cost = daemon.now().get("cost") or {}
            units = cost.get("unit_costs") or []
            return cost if units and units[0].get("unit_cost") and cost.get(
                "storage_items") and "notebook-job" in cost.get("by_job", {}) else None

        poll(priced, 120, "/v1/now with a unit cost, a storage item and the job",
             explain=daemon.log_tail)
        # Several rounds, so that the store holds several counter readings.
        poll(lambda: len(_readings(daemon.db)) >= 3, 120, "three unit-cost readings stored",
             explain=daemon.log_tail)
        now_cost = daemon.now()["cost"]
        out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(daemon.db),
                              "--since", "10m", "--json"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        spend = json.loads(out.stdout)["spend"]
    finally:
        daemon.stop()
    assert set(spend["by_job"]) == set(now_cost["by_job"]) == {"notebook-job"}
    [live_unit] = now_cost["unit_costs"]
    [unit] = spend["unit_costs"]
    assert (unit["target"], unit["unit"], unit["per"]) == ("notebook-job", "tokens", 1_000_000)
    # The same burn over the same steady counter: the same price per 1M tokens (the report's
    # readings end at the last round stored, /v1/now's at its last poll; on a loaded host the
    # ticks between them are charged over unequal spans, 10.1% apart in one full-suite run).
    assert unit["unit_cost"] == pytest.approx(live_unit["unit_cost"], rel=0.25)
    assert [(s["path"], s["bytes"], s["per_month"]) for s in spend["storage_items"]] == [
        (s["path"], s["bytes"], s["per_month"]) for s in now_cost["storage_items"]]
    assert spend["storage_items"][0]["bytes"] >= 3 << 20
    assert spend["storage"] > 0
    # The hour spend the daemon recorded (what a report of a long range reads) holds at least
    # what /v1/now had counted when it was asked (the daemon charged on until it stopped).
    recorded = _recorded_total(daemon.db)
    assert recorded >= now_cost["total"] * 0.999 > 0


def _recorded_total(db: Path) -> float:
    from daemon.store.reader import StoreReader
    from daemon.store.schema import KIND_SPEND, MICRODOLLARS, SPEND_METRICS

    reader = StoreReader(str(db))
    try:
        return reader.query("SELECT sum(sum) AS s FROM rollups WHERE kind = ? AND metric = ?",
                            (KIND_SPEND, SPEND_METRICS["total"]))[0]["s"] / MICRODOLLARS
    finally:
        reader.close()


def _readings(db: Path) -> list[tuple]:
    from daemon.store.reader import StoreReader

    reader = StoreReader(str(db))
    try:
        return [tuple(r.values()) for r in reader.query(
            "SELECT ts FROM meter_readings WHERE kind = 'unit'")]
    finally:
        reader.close()


def test_a_unit_cost_is_the_same_over_any_range_that_holds_the_same_readings(tmp_path,
                                                                            counter_url):
    """Probe 126 F6: the review's unit cost was the target's dollars over the whole range times
    the share of the range its counter readings spanned, so a store whose readings spanned 75 s
    of a 1-hour range read $0.11 per 1M tokens where /v1/now read $0.79 (and $0.43 over 10
    minutes). Over a 10-minute and a 1-hour range ending at the same instant, both holding the
    same readings (a few rounds of a young store), the report's spend and review say what the
    target spent between its first and last reading over the tokens counted between them."""
    storage = tmp_path / "checkpoints"
    storage.mkdir()
    folder = tmp_path / "daemon"
    folder.mkdir()
    daemon = start(folder, "idle-host", args=[
        "--config", str(write_config(folder, counter_url, storage))])
    try:
        poll(lambda: len(_readings(daemon.db)) >= 4, 120, "four unit-cost readings stored",
             explain=daemon.log_tail)
        [live_unit] = daemon.now()["cost"]["unit_costs"]
    finally:
        assert daemon.stop() == 0
    until = str(time.time())  # the same end for both ranges; the store no longer grows

    def unit_costs(since: str) -> tuple[dict, dict]:
        out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(daemon.db),
                              "--since", since, "--until", until, "--json"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        document = json.loads(out.stdout)
        [spent] = document["spend"]["unit_costs"]
        [reviewed] = document["review"]["unit_costs"]
        return spent, reviewed

    short, long = unit_costs("10m"), unit_costs("1h")
    for spent, reviewed in (short, long):
        assert reviewed["unit_cost"] == pytest.approx(spent["unit_cost"], rel=1e-9)
        assert reviewed["spend"] == pytest.approx(spent["spend"], rel=1e-9)
        assert spent["units"] > 0 and spent["spend"] > 0
    assert long[1]["unit_cost"] == pytest.approx(short[1]["unit_cost"], rel=1e-9)
    assert long[1]["spend"] == pytest.approx(short[1]["spend"], rel=1e-9)
    # what /v1/now's meter divided: the same burn over the same steady counter
    assert short[1]["unit_cost"] == pytest.approx(live_unit["unit_cost"], rel=0.25)
