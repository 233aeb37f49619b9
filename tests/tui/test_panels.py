"""What the panels show is what the daemon says: a GPU's idle/busy state is its verdict (Gpu.busy,
from [idle].utilization), whatever the utilization reads; no verdict shows no state."""

from __future__ import annotations

import dataclasses

import pytest

from daemon.wire import Now
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.fleet import FleetPanel
from mlcost_tui.panels.gpus import GpuPanel
from tests.tui.fixtures import TS, StubClient, now_document


def with_verdicts(verdicts: list[bool | None]) -> dict:
    doc = now_document(gpus=len(verdicts))
    for gpu, busy in zip(doc["gpus"], verdicts, strict=True):
        gpu["utilization"] = 2.0  # low everywhere: the state must come from the verdict alone
        if busy is None:
            gpu.pop("busy")
        else:
            gpu["busy"] = busy
    return doc


@pytest.mark.asyncio
async def test_gpu_state_is_the_daemons_verdict_not_a_threshold_of_the_tuis():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        now = Now.from_dict(with_verdicts([True, False, None]))
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        gpus = app.query_one(GpuPanel)
        states = [str(gpus.get_cell_at((row, gpus.get_column_index("state")))).strip()
                  for row in range(gpus.row_count)]
        assert states == ["busy", "IDLE", "-"]


@pytest.mark.asyncio
async def test_fleet_counts_the_gpus_each_daemon_calls_idle():
    clients = [StubClient(), StubClient()]
    clients[1].name = "unix:/other.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        hosts = tuple(HostSnapshot(c.name, Now.from_dict(with_verdicts(v)), None, 0.01, TS)
                      for c, v in zip(clients, ([False, False, True], [True, None, True]),
                                      strict=True))
        app.post_message(SnapshotArrived(hosts))
        await pilot.pause()
        fleet = app.query_one(FleetPanel)
        idle = fleet.get_column_index("idle")
        assert [str(fleet.get_cell_at((row, idle))) for row in range(2)] == ["2", "0"]


@pytest.mark.asyncio
async def test_tree_view_shows_full_pids_branches_and_the_gpu_each_worker_feeds():
    from mlcost_tui.panels.processes import ProcessPanel

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        doc = now_document(processes=7)
        doc["processes"][6]["ppid"] = 1004  # a worker of a worker
        for proc in doc["processes"]:
            proc["pid"] += 4_190_000  # seven-digit pids
            proc["ppid"] += 4_190_000 if proc["ppid"] != 1 else 0
        now = Now.from_dict(doc)
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        pid, gpus = procs.get_column_index("pid"), procs.get_column_index("gpus")
        rows = [(str(procs.get_cell_at((r, pid))), str(procs.get_cell_at((r, gpus))))
                for r in range(procs.row_count)]
        parent = [i for i, (p, _) in enumerate(rows) if p == "4191000"][0]
        # workers sort like any rows ($/h, then pid, biggest first); each feeds GPU 0
        assert rows[parent + 1:parent + 4] == [("├ 4191005", "(0)"), ("└ 4191004", "(0)"),
                                                ("  └ 4191006", "(0)")]
        width = procs.ordered_columns[pid].get_render_width(procs)
        assert width >= len("  └ 4191006") + 2  # the whole pid is drawn, not cut


@pytest.mark.asyncio
async def test_a_click_on_a_column_header_sorts_by_it_and_again_inverts():
    from mlcost_tui.panels.processes import ProcessPanel
    from tests.tui.fixtures import snapshot

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 36)) as pilot:
        app.post_message(SnapshotArrived((snapshot(processes=6),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        keys = list(procs.shown_keys)
        for key in ("cpu", "gpu_mem", "command"):
            x = sum(c.get_render_width(procs) for c in procs.ordered_columns[:keys.index(key)])
            assert await pilot.click(ProcessPanel, offset=(x + 3, 1))
            await pilot.pause()
            assert procs.sort_key == key and not procs.inverted
            column = procs.get_column_index(key)
            shown = [str(procs.get_cell_at((r, column))) for r in range(procs.row_count)]
            assert await pilot.click(ProcessPanel, offset=(x + 3, 1))
            await pilot.pause()
            assert procs.inverted
            assert [str(procs.get_cell_at((r, column)))
                    for r in range(procs.row_count)] == shown[::-1] or key == "cpu"
        assert "command" in procs.border_title


@pytest.mark.asyncio
async def test_the_job_column_appears_when_a_process_has_one():
    import dataclasses

    from mlcost_tui.panels.processes import ProcessPanel
    from tests.tui.fixtures import snapshot

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 50)) as pilot:
        plain = snapshot(processes=4)
        app.post_message(SnapshotArrived((plain,)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        assert "job" not in procs.shown_keys
        assert plain.now is not None
        with_job = dataclasses.replace(plain, now=dataclasses.replace(plain.now, processes=tuple(
            dataclasses.replace(p, workload="ml/train-7f" if p.pid == 1001 else None)
            for p in plain.now.processes)))
        app.post_message(SnapshotArrived((with_job,)))
        await pilot.pause()
        assert "job" in procs.shown_keys
        column = procs.get_column_index("job")
        jobs = {str(procs.get_cell_at((r, column))) for r in range(procs.row_count)}
        assert jobs == {"ml/train-7f", "-"}
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert "job" not in procs.shown_keys  # low priority: gone first when narrow


@pytest.mark.asyncio
async def test_fleet_saves_the_combined_figure_not_the_sum_of_overlapping_ones():
    """The fleet's saves/month added the recommendations' standalone figures, which overlap
    (an idle process stopped and a smaller instance both count its GPU), above what its own
    header shows; it is the host's combined figure."""
    clients = [StubClient(), StubClient()]
    clients[1].name = "unix:/other.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    docs = [now_document(), now_document()]
    docs[0]["savings"] = dict(docs[0]["savings"], potential_per_month=1500.0)
    docs[1]["savings"] = dict(docs[1]["savings"], potential_per_month=None)
    for rec in docs[1]["recommendations"]:
        rec["combined_savings_per_month"] = 100.0
    async with app.run_test(size=(160, 48)) as pilot:
        hosts = tuple(HostSnapshot(c.name, Now.from_dict(d), None, 0.01, TS)
                      for c, d in zip(clients, docs, strict=True))
        app.post_message(SnapshotArrived(hosts))
        await pilot.pause()
        fleet = app.query_one(FleetPanel)
        saves = fleet.get_column_index("saves")
        shown = {str(fleet.get_row_at(row)[1]): str(fleet.get_cell_at((row, saves)))
                 for row in range(2)}
        assert shown == {"unix:/stub.sock": "$1,500",
                         "unix:/other.sock": fmt_money(100.0 * len(docs[1]["recommendations"]))}


def fmt_money(value: float) -> str:
    from mlcost_tui import format as fmt

    return fmt.money(value)


@pytest.mark.parametrize("kinds", [False, True])
@pytest.mark.parametrize("jobs", [False, True])
def test_a_wider_terminal_never_takes_a_column_away(kinds, jobs):
    """Columns come back from the most important down as the terminal widens, and stay: the
    process state (`S`, 3 cells) showed at 100 columns, went at 160, came back at 180, and
    RSS showed at 130 and went at 140 (each fitted into what the columns before it left)."""
    from mlcost_tui.keyed_table import fit_columns
    from mlcost_tui.layout import layout_for
    from mlcost_tui.panels.gpus import GpuPanel
    from mlcost_tui.panels.processes import WIDE_COMMAND_FROM, ProcessPanel
    from mlcost_tui.panels.recommendations import RecommendationTable

    processes = ProcessPanel()
    processes.show_kinds, processes.show_jobs = kinds, jobs
    for height in (24, 36):
        before: dict[str, set[str]] = {}
        for width in range(80, 241):
            table_width = layout_for(width, height, 8, 5, 3).table_width
            shown = {"processes": {c.key for c in processes.columns_for(table_width)}}
            for panel in (GpuPanel, RecommendationTable, FleetPanel):
                shown[panel.__name__] = {c.key for c in fit_columns(panel.all_columns(),
                                                                    table_width)}
            if table_width == WIDE_COMMAND_FROM:  # (by design: the command takes a quarter)
                before.pop("processes", None)
            for name, keys in shown.items():
                assert before.get(name, set()) <= keys, (name, width, before[name] - keys)
            before = shown
            if width < 150:
                assert "state" not in shown["processes"], width  # README: by 200, with read/s


def test_a_daemon_target_cut_to_its_column_keeps_what_tells_targets_apart():
    from mlcost_tui.panels.fleet import short_target

    # sockets in one folder: the file names differ (all read 'unix:/tmp/wttui/…')
    assert short_target("unix:/run/mlcost/gpu-node-017.sock", 19) == "…/gpu-node-017.sock"
    assert short_target("unix:/tmp/wttui/gone.sock", 17) == "…/wttui/gone.sock"
    assert short_target("http://gpu-node-017.training.example.internal:9347", 17) == \
        "gpu-node-01…:9347"
    assert short_target("http://gpu1:9347", 17) == "http://gpu1:9347"  # whole where it fits


@pytest.mark.asyncio
async def test_a_process_whose_gpus_are_all_idle_reads_idle_unless_it_waits_on_something():
    """README: a process whose GPUs are all IDLE reads `idle` in the phase column whatever its
    last sampled stacks said. Only `compute` was read so: `unknown` (no stack said anything)
    and no phase yet stayed, beside identical processes reading `idle` (probe 125 F8). A wait
    (data_wait) stays: it says why the GPU is idle. On a busy GPU the phase is as sampled."""
    from mlcost_tui.panels.processes import ProcessPanel

    doc = with_verdicts([True, False])
    doc["processes"] = doc["processes"][:1]
    template = doc["processes"][0]
    phases = {1000: (0, "unknown"), 1001: (1, "unknown"), 1002: (1, None), 1003: (1, "compute"),
              1004: (1, "data_wait")}
    doc["processes"] = [
        {**template, "key": f"{pid}:{TS}", "pid": pid, "phase": phase,
         "gpus": [{"index": gpu, "memory_bytes": 1 << 30, "sm_share": 0.0}]}
        for pid, (gpu, phase) in phases.items()]
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        now = Now.from_dict(doc)
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        column = procs.get_column_index("phase")
        shown = {pid: str(procs.get_cell_at((procs.get_row_index(f"{pid}:{TS}"), column))).strip()
                 for pid in phases}
        assert shown == {1000: "unknown", 1001: "idle", 1002: "idle", 1003: "idle",
                         1004: "data_wait"}, shown


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_command_column_sorts_by_what_it_shows(size):
    """Sorted by command, the rows are in the order of what the column shows (the module or
    script, the interpreter left out at 80 columns and the same before it at 200): sorted by
    the whole command line, every `python -m` came before every script and `hostile.py` sat
    between `inference_server` and `healthy_train` (probe 125 F5)."""
    from mlcost_tui.panels.processes import ProcessPanel

    commands = {1000: "/opt/venv/bin/python -m pkg.workloads.inference_server --gpu 4",
                1001: "/opt/venv/bin/python hostile.py " + "x" * 300,
                1002: "/opt/venv/bin/python -m pkg.workloads.healthy_train --gpu 0",
                1003: "/opt/venv/bin/python -m pkg.workloads.checkpoint_heavy --gpu 2",
                1004: "/usr/bin/bash ./run.sh"}
    doc = now_document(processes=5)
    for proc in doc["processes"]:
        proc["command"] = commands[proc["pid"]]
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        now = Now.from_dict(doc)
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        procs.sort_by("command")
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        rows = sorted(now.processes, key=lambda p: procs.get_row_index(p.key))
        assert [p.pid for p in rows] == [1004, 1003, 1002, 1001, 1000], [p.command for p in rows]
        shown = [str(procs.get_cell_at((i, procs.get_column_index("command")))) for i in range(5)]
        assert "checkpoint_heavy" in shown[1] and "hostile.py" in shown[3], shown


@pytest.mark.asyncio
async def test_a_fleet_host_that_stopped_answering_says_as_of_when_and_goes_first():
    """Its row kept `live` in green and full-colour figures after its daemon stopped answering
    (the one host's view dims them and says `as of`): now it says since when, its figures are
    dimmed, and it goes on top with the down hosts, above a costlier live one."""
    clients = [StubClient(), StubClient()]
    clients[1].name = "unix:/other.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        live, old = with_verdicts([False]), with_verdicts([False])
        live["burn"]["total_per_hour"], old["burn"]["total_per_hour"] = 90.0, 10.0
        answered = TS - 120
        hosts = (HostSnapshot(clients[0].name, Now.from_dict(live), None, 0.01, TS),
                 HostSnapshot(clients[1].name, Now.from_dict(old), "connection refused", 0.01,
                              TS, attempt=3, answered_at=answered))
        app.post_message(SnapshotArrived(hosts))
        await pilot.pause()
        fleet = app.query_one(FleetPanel)
        status, burn = fleet.get_column_index("status"), fleet.get_column_index("burn")
        first, second = ([fleet.get_cell_at((row, c)) for c in (status, burn)] for row in (0, 1))
        assert str(first[0]) == f"as of {fmt.clock_time(answered)[:5]}"
        assert str(first[1]).strip() == fmt.money(10.0)
        assert any("dim" in str(span.style) for span in first[1].spans), first[1].spans
        assert str(second[0]) == "live" and str(second[1]).strip() == fmt.money(90.0)


def test_a_fleet_where_no_daemon_answers_is_still_the_fleet_as_of_its_newest_answer():
    """With every daemon down, the header showed the first host's own snapshot (its name, its
    instance) over the fleet's table: now the fleet's totals as last seen, said to be old."""
    from mlcost_tui.sources import fleet_totals

    docs = [with_verdicts([False]), with_verdicts([False, True])]
    docs[0]["burn"]["total_per_hour"], docs[1]["burn"]["total_per_hour"] = 1.5, 2.0
    hosts = tuple(HostSnapshot(f"unix:/{i}.sock", Now.from_dict(doc), "connection refused",
                               0.01, TS, attempt=2, answered_at=TS - 60 + i)
                  for i, doc in enumerate(docs))
    fleet = fleet_totals(hosts)
    assert fleet is not None and fleet.now is not None and fleet.error is not None
    assert fleet.now.hostname == "fleet of 2 (0 answering)"
    assert (fleet.now.burn_per_hour, len(fleet.now.gpus)) == (3.5, 3)
    assert fleet.stale and fleet.answered_at == TS - 59
    never = fleet_totals(tuple(dataclasses.replace(h, now=None) for h in hosts))
    assert never is not None and never.now is None and never.target == "fleet of 2 (0 answering)"


@pytest.mark.asyncio
async def test_a_user_name_cut_to_its_column_says_it_was_cut():
    """Probe 139 F4: `probe139a` showed as `probe139`, two users alike; cut, it ends in an
    ellipsis as the command column does."""
    from mlcost_tui.panels.processes import ProcessPanel
    from tests.tui.fixtures import snapshot

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 50)) as pilot:
        plain = snapshot(processes=2)
        assert plain.now is not None
        users = {1000: "probe139a", 1001: "ann"}
        named = dataclasses.replace(plain, now=dataclasses.replace(plain.now, processes=tuple(
            dataclasses.replace(p, user=users.get(p.pid, p.user)) for p in plain.now.processes)))
        app.post_message(SnapshotArrived((named,)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        column = procs.get_column_index("user")
        shown = {str(procs.get_cell_at((r, column))) for r in range(procs.row_count)}
        assert "probe13…" in shown and "ann" in shown and "probe139" not in shown
