"""The host line (the GPU panel's title: CPU, memory, load) is the GPU host's, from its daemon's
/v1/now, for every connection: a real mlcostd on TCP (`--listen`, with its token) sends figures
in range and mlcost-top connected over TCP shows them. A document without them (an older
daemon, a replay) shows no host line, never the figures of the machine mlcost-top runs on."""

from __future__ import annotations

import asyncio
import os

import pytest
from simhost import pilot_wait_for, poll

from daemon.client import Client
from daemon.replay import Replay
from daemon.wire import HostUsage, Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.gpus import GpuPanel, host_title
from tests.tui.fixtures import HOST_USAGE, TS, StubClient, now_document


def test_the_host_line_says_cpu_memory_and_load():
    assert host_title(HostUsage.from_dict(HOST_USAGE)) == \
        "GPUs · host CPU 23% of 16 · memory 5.0G/16.0G · load 1.20 0.90 0.70"
    first_tick = HostUsage(cpu_percent=None, cpus=8, memory_used_bytes=None,
                           memory_total_bytes=None, load=None)
    assert host_title(first_tick) == "GPUs · host CPU - of 8"
    assert host_title(None) == "GPUs"


@pytest.mark.asyncio
async def test_a_document_without_host_usage_shows_no_host_line_even_on_a_local_socket():
    """An older daemon on this machine's unix socket: no line, rather than this machine's."""
    doc = now_document()
    del doc["host_usage"]
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 36)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/stub.sock", Now.from_dict(doc),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        gpus = app.query_one(GpuPanel)
        assert gpus.row_count == 4 and gpus.border_title == "GPUs"


@pytest.fixture(scope="module")
def tcp_daemon(shared_daemon):
    """A real daemon on TCP with its token (the token file beside its socket): the session's
    shared daemon (tests/conftest.py)."""
    daemon = shared_daemon
    port = poll(daemon.tcp_port, 30, "the TCP port", explain=daemon.log_tail)
    token = daemon.socket.with_name("mlcostd.token").read_text().strip()
    daemon.wait_for_ticks(3)
    return daemon, f"http://127.0.0.1:{port}", token


def now_over_tcp(base: str, token: str) -> dict:
    async def main() -> dict:
        async with Client(base, token=token) as client:
            return await client.now_raw()

    return asyncio.run(main())


def test_the_daemon_sends_its_hosts_cpu_memory_and_load_over_tcp(tcp_daemon):
    _, base, token = tcp_daemon

    def with_cpu_share() -> dict | None:  # the first tick has none: no tick before it
        usage = now_over_tcp(base, token).get("host_usage")
        return usage if usage and usage.get("cpu_percent") is not None else None

    usage = poll(with_cpu_share, 30, "a CPU share in /v1/now")
    assert 0.0 <= usage["cpu_percent"] <= 100.0
    assert usage["cpus"] == os.cpu_count()  # the daemon runs on this machine here
    assert 0 < usage["memory_used_bytes"] <= usage["memory_total_bytes"]
    assert len(usage["load"]) == 3 and all(v >= 0 for v in usage["load"])
    assert set(usage) == {"cpu_percent", "cpus", "memory_used_bytes", "memory_total_bytes",
                          "load"}  # figures only: nothing else about the host


@pytest.mark.asyncio
async def test_mlcost_top_over_tcp_shows_the_daemons_host_line(tcp_daemon):
    _, base, token = tcp_daemon
    app = MlcostTop([Client(base, token=token)], interval_s=0.3)
    async with app.run_test(size=(120, 36)) as pilot:
        gpus = app.query_one(GpuPanel)
        await pilot_wait_for(pilot, lambda: "host CPU" in str(gpus.border_title)
                             and "host CPU -" not in str(gpus.border_title))
        title = str(gpus.border_title)
        now = app.hosts[0].now
        assert now is not None and now.host_usage is not None
        assert title == host_title(now.host_usage)  # what the daemon sent, as sent
        assert f"of {os.cpu_count()}" in title and "memory " in title and "load " in title


@pytest.mark.asyncio
async def test_a_replay_of_the_daemons_store_shows_no_host_line(tcp_daemon):
    daemon, _, _ = tcp_daemon
    with Replay(daemon.db) as replay:
        app = MlcostTop([], poll=False, replay=replay)
        async with app.run_test(size=(120, 36)) as pilot:
            gpus = app.query_one(GpuPanel)
            await pilot_wait_for(pilot, lambda: gpus.row_count >= 1)
            assert app.hosts[0].now is not None and app.hosts[0].now.host_usage is None
            assert gpus.border_title == "GPUs"


def test_a_merged_row_of_idle_gpus_names_each_of_them_in_its_column():
    """Idle GPUs 3, 5, 6 and 7 merged into one row read '3,5,6' in the 5-wide column: GPU 7
    lost, while the row's ×4 and its dollars counted it."""
    from types import SimpleNamespace

    from mlcost_tui.panels.gpus import gpu_label

    def gpus(*indices: int) -> list:
        return [SimpleNamespace(index=i) for i in indices]

    assert gpu_label(gpus(3, 5, 6, 7)) == "3,5-7"
    assert gpu_label(gpus(5, 6, 7)) == "5-7" and gpu_label(gpus(1, 4, 6)) == "1,4,6"
    assert gpu_label(gpus(0, 1)) == "0,1" and gpu_label(gpus(2)) == "2"
    assert gpu_label(gpus(0, 1, 2, 4, 5, 6)) == "0-2,4-6"
