"""A process's workload kind over time: the store appends a row when a kind changes
(daemon.store.facts.write_process_kinds), so a replay, a snapshot and a report show the kind as
it was at their tick, not the last one the daemon classified; retention keeps the kind in force
at the oldest tick; a hostile row is read as data."""

from __future__ import annotations

import sqlite3

import pytest

from daemon.analysis.kinds import Kind
from daemon.replay import Replay
from daemon.store import facts, queries
from daemon.store.snapshot import write_snapshot
from tests.daemon.scripted import T0, recording_daemon

PID, START = 4242, 1000.5  # the scripted process (tests/daemon/scripted.py)
TRAINING = Kind("training", 0.8, ("optimizer_step frames in its stacks",)).as_dict()
SERVING = Kind("online_inference", 0.9, ("listens on TCP port 8000",), serves=True,
               listening_ports=(8000,)).as_dict()


def kinds_at(replay: Replay, ts: float) -> tuple[str | None, bool]:
    [proc] = [p for p in replay.state_at(ts)["processes"] if p["pid"] == PID]
    return proc["kind"], proc["serves"]


def rows(path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_replay_and_snapshots_show_the_kind_as_it_was_at_the_tick(tmp_path):
    daemon = recording_daemon(tmp_path, 5.0, ticks=40)  # ticks at T0+1 .. T0+40
    store = daemon.store
    assert store is not None
    assert facts.write_process_kinds(store, {(PID, START): TRAINING}, T0 + 5) == 1
    # The same kind with new evidence figures only: no row (within KIND_EVERY_S) ...
    moved = dict(TRAINING, kind_confidence=0.81)
    assert facts.write_process_kinds(store, {(PID, START): moved}, T0 + 10) == 0
    # ... a new kind: at once.
    assert facts.write_process_kinds(store, {(PID, START): SERVING}, T0 + 30) == 1
    store.set_meta("kinds", {f"{PID}:{START:.3f}": SERVING})  # what the daemon last classified
    store.close()
    db = daemon.db
    assert rows(db, "SELECT kind FROM process_kinds ORDER BY ts") == [("training",),
                                                                      ("online_inference",)]
    with Replay(db) as replay:
        assert kinds_at(replay, T0 + 3) == (None, False)  # not yet classified then
        assert kinds_at(replay, T0 + 20) == ("training", False)
        assert kinds_at(replay, T0 + 35) == ("online_inference", True)

    # A snapshot from T0+20: the kind in force at its first tick comes along.
    snap = tmp_path / "snap.db"
    write_snapshot(db, snap, T0 + 20, T0 + 40)
    assert rows(snap, "SELECT kind FROM process_kinds ORDER BY ts") == [("training",),
                                                                        ("online_inference",)]
    with Replay(snap) as replay:
        assert kinds_at(replay, T0 + 21) == ("training", False)
        assert kinds_at(replay, T0 + 39) == ("online_inference", True)
    # A snapshot after the change holds only the kind in force then.
    late = tmp_path / "late.db"
    write_snapshot(db, late, T0 + 32, T0 + 40)
    assert rows(late, "SELECT kind FROM process_kinds") == [("online_inference",)]


def test_the_report_reads_the_kind_at_the_end_of_its_window(tmp_path):
    from daemon.commands.report import build
    from daemon.store.reader import StoreReader

    daemon = recording_daemon(tmp_path, 5.0, ticks=40)
    store = daemon.store
    assert store is not None
    facts.write_process_kinds(store, {(PID, START): TRAINING}, T0 + 5)
    facts.write_process_kinds(store, {(PID, START): SERVING}, T0 + 30)
    store.close()
    reader = StoreReader(str(daemon.db))
    try:
        early = build(reader, 20, until=T0 + 20)
        late = build(reader, 40, until=T0 + 40)
    finally:
        reader.close()
    assert [p["kind"] for p in early["processes"] if p["pid"] == PID] == ["training"]
    assert [p["kind"] for p in late["processes"] if p["pid"] == PID] == ["online_inference"]


def test_the_report_prints_the_inference_audit_recorded_with_the_kind(tmp_path):
    from daemon.analysis.inference_audit import audit_inference
    from daemon.commands.report import build, render_text
    from daemon.sources.kindfacts import KindFacts
    from daemon.store.reader import StoreReader

    daemon = recording_daemon(tmp_path, 5.0, ticks=40)
    store = daemon.store
    assert store is not None
    serving = Kind("online_inference", 0.9, ("listens on TCP port 8000",), serves=True)
    audit = audit_inference(serving, KindFacts(libraries=("torch",)), (), [5.0] * 20)
    assert audit is not None
    facts.write_process_kinds(store, {(PID, START): {**serving.as_dict(),
                                                     "inference": audit.as_dict()}}, T0 + 5)
    store.close()
    reader = StoreReader(str(daemon.db))
    try:
        report = build(reader, 40, until=T0 + 40)
    finally:
        reader.close()
    [proc] = [p for p in report["processes"] if p["pid"] == PID]
    advice = proc["inference"]["advice"]
    assert proc["inference"]["runtime"] == "PyTorch eager"
    assert [a["name"] for a in advice] == ["dynamic_batching", "serving_runtime", "quantization"]
    burn = proc["burn_per_hour"]
    assert burn and advice[2]["saving_per_month"] == pytest.approx(0.5 * burn * 730, abs=0.01)
    text = render_text(report, 200)
    assert "Inference audit (runtime, quantization, batching; advice with its saving)" in text
    assert f"  {PID} online_inference: runtime PyTorch eager (maps torch); quantization: none " \
        "seen; SM share at load 5.0% (20 readings)" in text
    assert "    - dynamic_batching: batch requests dynamically" in text


def test_an_advice_whose_saving_is_not_estimated_yet_says_so_not_zero_dollars():
    """With under 10 SM share readings the runtime advice carries a saving of 0: the report
    says it is not estimated (as mlcost-top does), not "saves up to $0.00/month"."""
    from daemon.analysis.inference_audit import audit_inference, with_savings
    from daemon.commands.report import _render_inference
    from daemon.sources.kindfacts import KindFacts

    serving = Kind("online_inference", 0.9, ("listens on TCP port 8000",), serves=True)
    audit = audit_inference(serving, KindFacts(libraries=("torch",)), (), [5.0] * 3)
    assert audit is not None
    proc = {"pid": PID, "gpus": [0], "kind": "online_inference",
            "inference": with_savings(audit.as_dict(), 2.0)}
    lines = [line for line in _render_inference([proc]) if line.startswith("    - ")]
    runtime = [line for line in lines if "serving_runtime" in line]
    assert runtime and runtime[0].endswith("(saving not estimated)")
    quantization = [line for line in lines if "quantization" in line]
    assert quantization and quantization[0].endswith("(saves up to $730.00/month)")
    assert "$0.00" not in "\n".join(lines)


def test_retention_keeps_the_kind_in_force_at_the_oldest_tick_and_hostile_rows_are_data(
        tmp_path):
    daemon = recording_daemon(tmp_path, 5.0, ticks=40)
    store = daemon.store
    assert store is not None
    facts.write_process_kinds(store, {(PID, START): TRAINING}, T0 + 2)
    facts.write_process_kinds(store, {(PID, START): SERVING}, T0 + 4)
    facts.write_process_kinds(store, {(PID, START): TRAINING}, T0 + 30)
    store.close()
    conn = sqlite3.connect(daemon.db)
    try:
        from daemon.store.maintenance import _PRUNE_KINDS

        bound = round((T0 + 20) * 1000)
        conn.execute(_PRUNE_KINDS, (bound, bound))  # what retention runs below its bound
        kept = [k for (k,) in conn.execute("SELECT kind FROM process_kinds ORDER BY ts")]
        assert kept == ["online_inference", "training"]  # the one in force at T0+20, the latest
        proc = conn.execute("SELECT id FROM processes WHERE pid = ?", (PID,)).fetchone()[0]
        conn.execute("INSERT INTO process_kinds (proc, ts, kind, body) VALUES (?, ?, ?, ?)",
                     (proc, round((T0 + 35) * 1000), "x",
                      '{"kind": "training\\u001b[2J", "kind_evidence": [1, "' + "y" * 900
                      + '"], "serves": "yes", "listening_ports": [99999, 80]}'))
        conn.execute("INSERT INTO process_kinds (proc, ts, kind, body) VALUES (?, ?, ?, ?)",
                     (proc, round((T0 + 38) * 1000), "x", "not json"))
        conn.commit()
    finally:
        conn.close()
    with Replay(daemon.db) as replay:
        [proc] = [p for p in replay.state_at(T0 + 36)["processes"] if p["pid"] == PID]
        assert "\x1b" not in proc["kind"] and proc["kind"].startswith("training")
        assert proc["serves"] is False  # "yes" is not true
        assert [len(e) for e in proc["kind_evidence"]] == [200]
        # a row that is not JSON: no kind at that tick rather than an error
        assert queries.process_kinds(replay.reader, T0 + 39) == {}
