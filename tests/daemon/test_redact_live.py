"""Redaction where mlcostd reads a name from outside, end to end (probe: redaction, fourth
round): a real `mlcostd run --simulate` whose simulated GPU is named like a GitHub token, whose
price comes from an extra catalog whose source is a URL with an API key in its query, and which
reads two unit-cost counters whose URLs differ only in their token. Nothing of any secret is
served (/v1/now, /metrics), stored (every byte of the database and its WAL) or reported; the
two counters are recorded apart, each under its own name."""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import livedaemon
import pytest
from simhost import poll

SECRETS = ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "hunter2", "AKIAIOSFODNN7EXAMPLE",
           "liveCodeSecret0", "Zq7xK9mWp2VbN4rT", "Yt5wLiveSplitTok")
# A GPU process whose command line carries a secret in its `python -c` code (probe F2) and an
# authorization header with no space after its name, in one argument and split in two (F1).
WORKLOAD = """import os; os.environ['HF_TOKEN'] = 'liveCodeSecret0'
import time
from daemon.sim.device import Device
dev = Device(gpu_index=0)
dev.alloc(1 << 30)
while True:
    dev.kernel(0.05, sm=0.5)
    time.sleep(0.2)
"""
WORKLOAD_ARGV = [sys.executable, "-c", WORKLOAD, "-H", "Authorization:Bearer Zq7xK9mWp2VbN4rT",
                 "-H", "Authorization:Token", "Yt5wLiveSplitTok"]
# An extra catalog's row for the simulated host's type, its source a URL with an API key.
CATALOG_HEADER = ("provider,region,instance_type,accelerator,accelerator_count,"
                  "accelerator_memory_gib,vcpus,memory_gib,price_unit,on_demand,spot_low,"
                  "spot_high,commit_1y,commit_3y,source,as_of,status,note\n")
CATALOG_ROW = ("aws,us-east-1,p9.redacted,H100,1,80,16,128,host-hour,9.5,,,,,"
               "https://prices.example/sheet.csv?api_key=hunter2,2026-11-01,current,\n")


class Counters(http.server.BaseHTTPRequestHandler):
    """Two services' request counters on one exporter, each behind its own token: 100
    requests for `?token=hunter2`, 1000 for any other."""

    def do_GET(self) -> None:
        token = parse_qs(urlsplit(self.path).query).get("token", [""])[0]
        count = 100 if token == "hunter2" else 1000
        body = f"# TYPE requests counter\nrequests_total {count}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving both counters; its /metrics URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counters)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def _raw(socket_path: Path, path: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=str(socket_path))) as session:
        async with session.get("http://x" + path) as response:
            assert response.status == 200, (path, response.status, await response.text())
            return await response.text()


def _hostile_host(folder: Path, workload: bool = False) -> tuple[Path, Path]:
    """(a scenario whose GPU is named like a GitHub token, on a type an extra catalog prices
    with a source that holds an API key, and with `workload` a process on it whose command line
    holds secrets (WORKLOAD_ARGV); that catalog)."""
    catalog = folder / "sheet.csv"
    catalog.write_text(CATALOG_HEADER + CATALOG_ROW)
    scenario = folder / "named.toml"
    scenario.write_text(
        '[instance]\nprovider = "aws"\ntype = "p9.redacted"\nregion = "us-east-1"\n'
        '[gpu]\nmodel = "NVIDIA H100 ghp_abcdefghijklmnopqrstuvwxyz0123456789"\ncount = 1\n'
        "memory_gib = 80\npower_idle_w = 70\npower_max_w = 700\n"
        + (f'[[workloads]]\nname = "leaky"\ngpus = [0]\ncommand = {json.dumps(WORKLOAD_ARGV)}\n'
           if workload else ""))
    return scenario, catalog


def test_check_shows_the_gpu_name_and_price_source_redacted(tmp_path):
    """`mlcostd check` lists the GPUs by NVML's names and says where the price is from: both
    were printed as read."""
    scenario, catalog = _hostile_host(tmp_path)
    config = livedaemon.config_file(tmp_path, {"pricing": {"extra_catalogs": [str(catalog)]}})
    done = subprocess.run(
        livedaemon.MLCOSTD + ["check", "--simulate", str(scenario), "--config", str(config),
                              "--json", "--db", str(tmp_path / "x.db")],
        capture_output=True, text=True, timeout=120, cwd=livedaemon.ROOT)
    leaks = [w for w in SECRETS if w in done.stdout + done.stderr]
    assert not leaks, done.stdout + done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert "NVIDIA H100 <redacted>" in checks["NVML"]["detail"], checks["NVML"]
    assert "api_key=<redacted>" in json.dumps(checks["price"]), checks["price"]


def test_gpu_names_price_sources_and_meter_names_are_redacted_where_read_and_kept_apart(
        mlcostd, tmp_path, exporter):
    """The simulated GPU's model name (NVML's name: in /v1/now, every /metrics label of the
    GPU, the store's `gpus` table) and the price's source (an extra catalog's text: in /v1/now,
    the `price_source` label, the store's host facts) were shown as read. And the two counters'
    readings were written under one redacted name, the second overwriting the first at each
    round. Each is redacted where it is read now, and the counters keep a name each. A GPU
    process's command line (WORKLOAD_ARGV) is served and stored with the secrets in its code and
    its authorization headers hidden, the schemes kept."""
    scenario, catalog = _hostile_host(tmp_path, workload=True)
    meters = [{"target": "svc", "url": f"{exporter}?token={token}", "metric": "requests",
               "unit": "requests", "per": 1000} for token in ("hunter2", SECRETS[2])]
    daemon = mlcostd("idle-host", interval=1.0, args=["--simulate", str(scenario)], config={
        "pricing": {"extra_catalogs": [str(catalog)]},
        "cost": {"evaluate_every": "5s", "unit_costs": meters}})

    def recorded() -> list[tuple[str, float]] | None:
        conn = sqlite3.connect(f"file:{daemon.db}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT name, max(value) FROM meter_readings WHERE kind = "
                                "'unit' GROUP BY name ORDER BY name").fetchall()
        finally:
            conn.close()
        return rows if len(rows) == 2 else None

    poll(recorded, 90, "both counters recorded", explain=daemon.log_tail)

    def leaky() -> str | None:
        return next((p["command"] for p in daemon.now().get("processes") or []
                     if "Authorization:" in p["command"]), None)

    command = poll(leaky, 90, "the workload's command line served", explain=daemon.log_tail)
    now = daemon.now()
    served = {"now": json.dumps(now), "metrics": asyncio.run(_raw(daemon.socket, "/metrics"))}
    assert daemon.stop() == 0, daemon.log_tail()
    rows = recorded()
    assert rows is not None
    report = subprocess.run(
        livedaemon.MLCOSTD + ["report", "--db", str(daemon.db), "--since", "1h", "--json"],
        capture_output=True, text=True, timeout=120, cwd=livedaemon.ROOT)
    assert report.returncode == 0, report.stderr
    served.update(report=report.stdout, log=daemon.log())
    leaks = {name: [w for w in SECRETS if w in text] for name, text in served.items()}
    for stored in daemon.folder.glob("mlcost.db*"):  # the database, its WAL: every byte
        data = stored.read_bytes()
        leaks[stored.name] = [w for w in SECRETS if w.encode() in data]
    assert not any(leaks.values()), json.dumps({k: v for k, v in leaks.items() if v})
    # the command line, redacted at the source: the code's value, each header's credential
    assert "os.environ['HF_TOKEN'] = <redacted>" in command, command
    assert command.endswith("-H Authorization:Bearer <redacted> -H Authorization:Token "
                            "<redacted>"), command
    # each is shown, redacted: the GPU's name, the price's source
    assert now["gpus"][0]["name"] == "NVIDIA H100 <redacted>", now["gpus"]
    assert 'modelName="NVIDIA H100 <redacted>"' in served["metrics"]
    source = now["host"]["price"]["source"]
    assert "https://prices.example/sheet.csv?api_key=<redacted>" in source, now["host"]["price"]
    assert now["host"]["price"]["per_hour"] == 9.5
    # two counters, each under its name, each with its own count
    name = r"svc http://127\.0\.0\.1:\d+/metrics\?token=<redacted> requests \[[0-9a-f]{4}\]"
    assert all(re.fullmatch(name, n) for n, _ in rows) and rows[0][0] != rows[1][0], rows
    assert sorted(count for _, count in rows) == [100.0, 1000.0], rows
