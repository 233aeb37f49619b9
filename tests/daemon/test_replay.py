"""Replay of a recorded store: a real mlcostd records the idle-host scenario for a dozen ticks,
then a copy of its database (VACUUM INTO) is replayed: state_at values and the TUI's [ ] stepping."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from simhost import poll

from daemon.replay import MAX_TIMES, Replay, ReplayError
from daemon.wire import Now

RECORDED_TICKS = 12  # at 0.5 s: enough to step with [ ], play, and see cost grow


@pytest.fixture(scope="module")
def store(mlcostd, tmp_path_factory) -> Path:
    """A copy of what `mlcostd run --simulate idle-host --interval 0.5` recorded: it runs until
    its store holds RECORDED_TICKS ticks, then stops (SIGTERM) and its database is copied."""
    daemon = mlcostd("idle-host", interval=0.5)
    daemon.wait_for_ticks(RECORDED_TICKS)
    assert daemon.stop() == 0, daemon.log_tail()
    copy = tmp_path_factory.mktemp("replay") / "copy.db"
    source = sqlite3.connect(daemon.db)
    source.execute("VACUUM INTO ?", (str(copy),))
    source.close()
    return copy


def test_times_are_the_recorded_ticks(store):
    with Replay(store) as replay:
        times = replay.times()
        assert 5 <= len(times) <= MAX_TIMES
        assert times == sorted(times)
        assert times[0] == replay.start and times[-1] == replay.end
        assert replay.interval_s == pytest.approx(0.5, abs=0.2)


def test_state_at_has_the_shape_of_now(store):
    with Replay(store) as replay:
        times = replay.times()
        state = replay.state_at(times[-1])
        assert state["ts"] == pytest.approx(times[-1])
        assert state["host"]["hostname"]
        assert state["host"]["simulated"] == "idle-host"
        assert len(state["gpus"]) == 1
        gpu = state["gpus"][0]
        assert gpu["utilization"] is not None and gpu["utilization"] < 5  # the idle host
        assert gpu["uuid"].startswith("GPU-")
        procs = [p for p in state["processes"] if p["gpus"]]
        assert procs, state["processes"]
        notebook = procs[0]
        assert notebook["key"] == f"{notebook['pid']}:{notebook['start_time']:.3f}"
        assert notebook["cpu_percent"] is not None  # a rate: the sample before was used
        price = state["price"]["per_hour"]
        assert price > 0
        # one idle GPU holding the whole host: all of it is burnt and wasted
        assert state["burn"]["total_per_hour"] == pytest.approx(price)
        assert state["burn"]["wasted_per_hour"] == pytest.approx(price)
        assert notebook["burn_per_hour"] == pytest.approx(price)
        # Charged from the tick before the one that first showed it on its GPU (the ledger
        # charges each tick's interval to the processes that tick shows): on a loaded machine
        # the workload is found some ticks after the first, and those seconds are not its cost.
        seen = [i for i, t in enumerate(times) if any(
            p["key"] == notebook["key"] and p["gpus"] for p in replay.state_at(t)["processes"])]
        elapsed = times[-1] - times[max(seen[0] - 1, 0)]
        assert notebook["cost"] == pytest.approx(price * elapsed / 3600, rel=0.2)
        assert isinstance(state["events"], list) and isinstance(state["recommendations"], list)
        now = Now.from_dict(state)  # the TUI reads it like a live /v1/now
        assert now.burn_per_hour == pytest.approx(price)
        assert now.processes and now.gpus


def test_state_at_is_as_of_that_tick(store):
    with Replay(store) as replay:
        times = replay.times()
        first, middle = replay.state_at(times[0]), replay.state_at(times[len(times) // 2])
        assert first["ts"] == pytest.approx(times[0])
        assert middle["tick"] > first["tick"]
        # before the recording starts: the first tick; between ticks: the one before
        assert replay.state_at(times[0] - 100)["ts"] == pytest.approx(times[0])
        between = (times[2] + times[3]) / 2
        assert replay.state_at(between)["ts"] == pytest.approx(times[2])
        # the process cost so far grows with time
        def cost(state):
            return max(p["cost"] or 0.0 for p in state["processes"])
        assert cost(middle) < cost(replay.state_at(times[-1]))
        for event in replay.state_at(times[len(times) // 2])["events"]:
            assert event["started_at"] <= middle["ts"]


def test_replay_never_writes(store):
    before = store.stat().st_mtime_ns, store.read_bytes()
    with Replay(store) as replay:
        replay.state_at(replay.times()[-1])
    assert (store.stat().st_mtime_ns, store.read_bytes()) == before


def test_replay_of_a_copied_store_leaves_nothing_beside_it(store, tmp_path):
    """A plain copy of a daemon's WAL-mode file: SQLite makes a -wal and a -shm to read it,
    and replay once left both beside the user's file (probe 125 F10)."""
    copy = tmp_path / "copied.db"
    shutil.copyfile(store, copy)
    with sqlite3.connect(copy) as db:
        db.execute("PRAGMA journal_mode=WAL")  # as the daemon's own file is
    db.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copied.db"]
    before = copy.read_bytes()
    with Replay(copy) as replay:
        replay.state_at(replay.times()[-1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copied.db"]
    assert copy.read_bytes() == before


def test_a_file_that_is_not_a_store_says_so(tmp_path):
    with pytest.raises(ReplayError, match="no store at"):
        Replay(tmp_path / "missing.db")
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite at all" * 100)
    with pytest.raises(ReplayError, match="not an mlcostd store"):
        Replay(junk)


@pytest.mark.asyncio
async def test_the_tui_steps_with_brackets(store):
    from mlcost_tui.app import MlcostTop
    from mlcost_tui.panels.gpus import GpuPanel
    from mlcost_tui.panels.header import HeaderPanel
    from mlcost_tui.panels.processes import ProcessPanel

    replay = Replay(store)
    times = replay.times()
    app = MlcostTop([], poll=False, replay=replay)
    async with app.run_test(size=(160, 48)) as pilot:

        async def settle():
            await app.workers.wait_for_complete()
            await pilot.pause()

        await settle()
        assert app.replay_index == 0 and app.now is not None
        assert app.now.ts == pytest.approx(times[0])
        assert app.query_one(GpuPanel).row_count == 1
        # the recorder's first tick may come before discovery has seen the notebook
        assert app.query_one(ProcessPanel).row_count == len(app.now.processes)
        header = str(app.query_one(HeaderPanel).render())
        assert "replay" in header and "tick 1/" in header
        await pilot.press("right_square_bracket")
        await settle()
        assert app.replay_index == 1 and app.now.ts == pytest.approx(times[1])
        await pilot.press("right_square_bracket", "right_square_bracket")
        await settle()
        assert app.now.ts == pytest.approx(times[3])
        await pilot.press("left_square_bracket")
        await settle()
        assert app.now.ts == pytest.approx(times[2])
        await pilot.press("right_curly_bracket")  # a minute on: past the end, so the last tick
        await settle()
        assert app.now.ts == pytest.approx(times[-1])
        assert app.query_one(ProcessPanel).row_count >= 1  # the notebook, by the last tick
        await pilot.press("left_curly_bracket")
        await settle()
        assert app.now.ts == pytest.approx(times[0])
        await pilot.press("space")  # play
        assert app.playing
        deadline = time.monotonic() + 30  # a bound, not a speed check
        while app.replay_index < 2 and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert app.replay_index >= 2
        await pilot.press("space")
        assert not app.playing
        assert "paused" in str(app.query_one(HeaderPanel).render())
        assert app.cannot_here("kill") is not None  # no daemon to act through


def test_mlcost_top_replay_of_a_bad_file_says_why(tmp_path):
    import subprocess
    import sys

    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("these are not the rows you are looking for\n" * 50)
    for path, expected in ((not_a_store, "is not an mlcostd store"),
                           (tmp_path / "missing.db", "no store at")):
        result = subprocess.run(
            [sys.executable, "-c", "import sys; from mlcost_tui.cli import main; sys.exit(main())",
             "--replay", str(path)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2
        assert expected in result.stderr


def test_a_replayed_process_has_its_recorded_stacks(store):
    from daemon.store import queries
    from daemon.wire import process_key

    replay = Replay(store)
    end = replay.times()[-1]
    sampled = {process_key(r["pid"], r["start_time"])
               for r in queries.stack_samples(replay.reader, replay.start, end)}
    assert sampled, "the idle-host scenario records stacks of its idle process"
    key = sorted(sampled)[0]
    balance = replay.phases_at(key, end)
    assert balance is not None
    stacks = [s for part in balance.values() for s in part.get("top_stacks") or []]
    assert stacks and all(s.get("file") and s.get("line") for s in stacks)
    assert replay.phases_at("1:1.000", end) is None  # no such process


@pytest.mark.asyncio
async def test_the_replay_details_screen_shows_the_recorded_stacks(store):
    from daemon.store import queries
    from daemon.wire import process_key
    from mlcost_tui.app import MlcostTop
    from mlcost_tui.panels.processes import ProcessPanel
    from mlcost_tui.screens.details import DetailsScreen

    replay = Replay(store)
    sampled = {process_key(r["pid"], r["start_time"])
               for r in queries.stack_samples(replay.reader, replay.start, replay.end)}
    app = MlcostTop([], poll=False, replay=replay)
    async with app.run_test(size=(160, 48)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("right_curly_bracket")  # the last tick: its stacks are recorded
        await app.workers.wait_for_complete()
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        row = next(i for i in range(procs.row_count)
                   if procs.coordinate_to_cell_key((i, 0))[0].value in sampled)
        procs.move_cursor(row=row)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        body = str(app.screen.query_one("#details-body").render())
        assert "Top stacks" in body and "no stacks recorded" not in body
        heading = str(app.screen.query_one("#details-heading").render())
        assert ":" not in heading.splitlines()[0].split("started")[0]  # no raw pid:start key


def test_a_recommendation_without_its_text_at_the_tick_says_when_its_text_is_from(store,
                                                                                   monkeypatch):
    """A store or snapshot written before recommendation texts were kept (no history row at or
    before the tick) falls back to the latest text, labelled; with a row, the text is exact
    (tests/daemon/test_replay_texts.py)."""
    from daemon import replay as replay_module
    from daemon.clock import local_time

    replay = Replay(store)
    first, last = replay.times()[0], replay.times()[-1]
    later = last + 3600  # evaluated again an hour on: its text is that hour's
    recorded = [{"id": "r1", "rule": "idle_gpu_held", "target": "gpu:0", "summary": "idle 61 min",
                 "first_seen": first, "last_seen": later, "action": {"kind": "none"}},
                {"id": "r2", "rule": "spot", "target": "host", "summary": "use spot",
                 "first_seen": first, "last_seen": first, "action": {"kind": "none"}}]
    monkeypatch.setattr(replay_module.queries, "recommendations",
                        lambda reader, since: [dict(r) for r in recorded
                                               if r["last_seen"] >= since])
    monkeypatch.setattr(replay_module.queries, "recommendation_texts",
                        lambda reader, since, at: {})  # as in a store from before the history
    shown = {r["id"]: r["summary"] for r in replay._recommendations(first)}
    assert shown["r1"] == f"(text as evaluated at {local_time(later, date=False)}) idle 61 min"
    assert shown["r2"] == "use spot"  # its text is from this tick


def test_each_tick_is_replayed_at_the_price_charged_then(store, tmp_path):
    """The daemon recorded the price it charged at its start; a later run at another price
    (here written into a copy of the store, as a restart would) prices only its own ticks."""
    copy = tmp_path / "repriced.db"
    conn = sqlite3.connect(store)
    conn.execute("VACUUM INTO ?", (str(copy),))
    conn.close()
    conn = sqlite3.connect(copy)
    recorded = conn.execute("SELECT ts, value, detail FROM meter_readings "
                            "WHERE kind = 'price'").fetchall()
    assert len(recorded) == 1  # written once, at the start
    ms = [r[0] for r in conn.execute("SELECT ts FROM ticks ORDER BY ts")]
    middle = ms[len(ms) // 2]
    detail = json.loads(recorded[0][2])
    first_price = detail["per_hour"]
    dearer = dict(detail, per_hour=first_price * 10, per_gpu_per_hour=first_price * 10,
                  instance_type="p5.48xlarge")  # resized, its volume (and store) kept
    with conn:
        conn.execute("INSERT INTO meter_readings (kind, name, ts, value, detail) VALUES "
                     "('price', 'host', ?, ?, ?)", (middle - 1, dearer["per_hour"],
                                                    json.dumps(dearer)))
        host = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'json:host'")
                          .fetchone()[0])
        conn.execute("UPDATE meta SET value = ? WHERE key = 'json:host'",
                     (json.dumps(dict(host, price=dearer)),))
    conn.close()
    with Replay(copy) as replay:
        before, after = replay.state_at(ms[1] / 1000), replay.state_at(ms[-1] / 1000)
        assert before["price"]["per_hour"] == pytest.approx(first_price)
        assert before["burn"]["total_per_hour"] == pytest.approx(first_price)
        assert after["price"]["per_hour"] == pytest.approx(first_price * 10)
        assert after["burn"]["total_per_hour"] == pytest.approx(first_price * 10)
        assert before["host"]["instance"]["type"] == detail["instance_type"] != "p5.48xlarge"
        assert after["host"]["instance"]["type"] == "p5.48xlarge"
        # the spend so far: each tick's interval at its own price (all at the last: far more)
        charged = sum((b - a) * (first_price * 10 if b >= middle else first_price)
                      for a, b in zip(ms, ms[1:], strict=False)) / 3.6e6
        assert after["cost"]["total"] == pytest.approx(charged, rel=0.05)


def test_an_idle_event_is_replayed_from_when_it_was_raised_not_from_its_start(mlcostd, tmp_path):
    """An idle event's start is the start of the idle period, `gpu_held_after` before the daemon
    raised it: replay showed the alert from its start, minutes before anyone was alerted."""
    daemon = mlcostd("idle-host", interval=0.5,
                     config={"idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s"}})
    found: list[sqlite3.Row] = []

    def raised() -> bool:
        conn = sqlite3.connect(f"file:{daemon.db}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            found[:] = conn.execute("SELECT kind, started_at, raised_at FROM events "
                                    "WHERE kind = 'gpu_held_idle'").fetchall()
        finally:
            conn.close()
        return bool(found)

    poll(raised, 90, "an idle event raised", every=0.5)
    daemon.wait_for_ticks(len(daemon.ticks()) + 2)  # ticks after it was raised
    assert daemon.stop() == 0, daemon.log_tail()
    [event] = found
    started, raised_at = event["started_at"] / 1000, event["raised_at"] / 1000
    assert raised_at - started >= 9.0  # raised once it had idled gpu_held_after
    with Replay(daemon.db) as replay:
        times = replay.times()
        before = [t for t in times if started <= t < raised_at - 0.5]
        after = [t for t in times if t >= raised_at]
        assert before and after

        def shown(t: float) -> bool:
            return any(e["kind"] == "gpu_held_idle" for e in replay.state_at(t)["events"])

        assert not any(shown(t) for t in before)
        assert shown(after[0])
