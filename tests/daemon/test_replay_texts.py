"""A replay shows each recommendation's text as it was at the tick: a real mlcostd records an
idle GPU whose advice grows ("idle for 16 s", then "21 s"), and the copy of its store, and a
snapshot of it, replay the early text early and the late one late. A store of the schema
before the text history keeps its recommendations readable once migrated."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from simhost import poll

from daemon.clock import local_time
from daemon.replay import Replay
from daemon.store import facts, queries
from daemon.store.reader import StoreReader
from daemon.store.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    _migration_recommendation_texts,
    unpack_text,
)
from daemon.store.snapshot import write_snapshot
from tests.daemon.scripted import T0, recording_daemon

IDLE_CONFIG = {  # advice about the idle notebook within seconds, evaluated every 5 s
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
    "cost": {"evaluate_every": "5s"},
}
RULE = "idle_gpu_held"
ADVICE_TIMEOUT_S = 180.0  # the text's idle time moves on at each evaluation; generous under load
_IDLE_FOR = re.compile(r"idle for (?:at least )?(\d+(?:\.\d+)?) (s|min|h)\b")


def minutes(summary: str) -> float:
    """The idle time a summary names, in minutes ('idle for 16 s', '3 min', '2.5 h')."""
    found = _IDLE_FOR.search(summary)
    assert found, summary
    return float(found.group(1)) / {"s": 60, "min": 1, "h": 1 / 60}[found.group(2)]


@pytest.fixture(scope="module")
def recording(mlcostd, tmp_path_factory) -> dict[str, Any]:
    """`mlcostd run --simulate idle-host` until the idle-GPU advice it serves names more idle
    minutes than it first did; the summaries /v1/now served, in order, and a copy of its store."""
    daemon = mlcostd("idle-host", interval=0.5, config=IDLE_CONFIG)
    served: list[str] = []

    def advice_grew() -> bool:
        rec = next((r for r in daemon.now().get("recommendations") or []
                    if r["rule"] == RULE), None)
        if rec is not None and (not served or served[-1] != rec["summary"]):
            served.append(rec["summary"])
        return len(served) >= 2 and minutes(served[-1]) > minutes(served[0])

    poll(advice_grew, ADVICE_TIMEOUT_S, f"the {RULE} advice naming more idle minutes",
         every=0.5, explain=daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()
    copy = tmp_path_factory.mktemp("texts") / "copy.db"
    source = sqlite3.connect(daemon.db)
    source.execute("VACUUM INTO ?", (str(copy),))
    source.close()
    return {"db": copy, "served": served}


def advice(state: dict[str, Any]) -> dict[str, Any]:
    found = [r for r in state["recommendations"] if r["rule"] == RULE]
    assert len(found) == 1, state["recommendations"]
    return found[0]


def first_seen(replay: Replay) -> float:
    return next(r["first_seen"] for r in queries.recommendations(replay.reader, 0.0)
                if r["rule"] == RULE)


def test_a_replay_shows_the_advice_as_it_was_at_each_tick(recording):
    served = recording["served"]
    with Replay(recording["db"]) as replay:
        seen = first_seen(replay)
        early_tick = next(t for t in replay.times() if t >= seen)
        early = advice(replay.state_at(early_tick))
        late = advice(replay.state_at(replay.end))
    assert early["summary"] == served[0]  # what the daemon said then, not its last words
    assert late["summary"] == served[-1]
    assert minutes(early["summary"]) < minutes(late["summary"])
    assert "text as evaluated" not in early["summary"] + late["summary"]
    assert early["evidence_seconds"] < late["evidence_seconds"]


def test_a_text_is_written_when_it_changes_not_every_round(recording):
    conn = sqlite3.connect(f"file:{recording['db']}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT t.ts, t.body FROM recommendation_texts t JOIN "
                            "recommendations r ON r.id = t.id WHERE r.rule = ? ORDER BY t.ts",
                            (RULE,)).fetchall()
        latest = conn.execute("SELECT body FROM recommendations WHERE rule = ?",
                              (RULE,)).fetchone()[0]
    finally:
        conn.close()
    texts = [json.loads(unpack_text(body)) for _, body in rows]
    assert {t["summary"] for t in texts} >= set(recording["served"])
    for before, after in zip(texts, texts[1:], strict=False):  # each row says something new
        assert facts.text_digest(before) != facts.text_digest(after)
    # the latest headline is always kept; figures alone may wait up to TEXT_EVERY_S
    assert facts.headline_digest(texts[-1]) == facts.headline_digest(json.loads(latest))


def test_a_snapshot_replays_the_text_in_force_at_its_first_tick(recording, tmp_path):
    served = recording["served"]
    with Replay(recording["db"]) as whole:
        seen, end = first_seen(whole), whole.end
    out = tmp_path / "later.db"
    write_snapshot(recording["db"], out, seen + 3.0, end)  # from after the first text's row
    with Replay(out) as part:
        assert part.start > seen
        early = advice(part.state_at(part.start))
        late = advice(part.state_at(part.end))
        start = part.start
    with Replay(recording["db"]) as whole:  # the text the whole store had at that tick
        in_force = advice(whole.state_at(start))
    # The idle time in the text moves on every round now ('idle for 10 s', '16 s'): the text
    # at the snapshot's first tick is the one in force then, one of those /v1/now served.
    assert early["summary"] == in_force["summary"] and early["summary"] in served
    assert late["summary"] == served[-1]
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        before = conn.execute("SELECT count(*) FROM recommendation_texts WHERE ts < ?",
                              (round((seen + 3.0) * 1000),)).fetchone()[0]
    finally:
        conn.close()
    assert before >= 1  # the text in force at the start came along


def old_store(path: Path) -> None:
    """A store of the schema before the text history, holding one recommendation as the old
    writer left it: first seen at T0+2, last seen (and last evaluated) at T0+20."""
    conn = sqlite3.connect(path)
    db = sqlite_utils.Database(conn)
    before_texts = MIGRATIONS.index(_migration_recommendation_texts)
    for migration in MIGRATIONS[:before_texts]:
        migration(db)
    conn.execute(f"PRAGMA user_version={before_texts}")
    conn.execute(
        "INSERT INTO recommendations (id, rule, target, first_seen, last_seen, snoozed_until, "
        "savings_per_month, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("old-1", "idle_gpu_held", "gpu:0", round((T0 + 2) * 1000), round((T0 + 20) * 1000),
         None, 700.0, '{"id": "old-1", "rule": "idle_gpu_held", "target": "gpu:0", '
                      '"summary": "idle for 3 min", "savings_per_month": 700.0}'))
    conn.commit()
    conn.close()


def test_an_old_store_keeps_its_advice_readable_once_migrated(tmp_path):
    db = tmp_path / "mlcost.db"
    old_store(db)
    reader = StoreReader(db)  # read as it is: no history table yet, no texts, no error
    try:
        assert queries.recommendation_texts(reader, 0.0, T0 + 30) == {}
        assert [r["summary"] for r in queries.recommendations(reader, 0.0)] == ["idle for 3 min"]
    finally:
        reader.close()

    daemon = recording_daemon(tmp_path, 5.0, ticks=30)  # opens, migrates, records T0+1..30
    store = daemon.store
    assert store is not None and store.health.schema_version == SCHEMA_VERSION
    rec = {"id": "old-1", "rule": "idle_gpu_held", "target": "gpu:0",
           "summary": "idle for 4 min", "savings_per_month": 720.0}
    facts.write_recommendations(store, [rec], T0 + 150)  # seen again, minutes on
    store.close()
    with Replay(db) as replay:
        def summary(at: float) -> str:
            return next(r["summary"] for r in replay.state_at(at)["recommendations"]
                        if r["id"] == "old-1")

        # its old text counts from its last sighting: from there exact; before it, that text
        # (not the latest) says when it is from
        assert summary(T0 + 22) == summary(T0 + 30) == "idle for 3 min"
        assert summary(T0 + 10) == \
            f"(text as evaluated at {local_time(T0 + 20, date=False)}) idle for 3 min"
        texts = queries.recommendation_texts(replay.reader, 0.0, T0 + 150)
        assert texts["old-1"][1]["summary"] == "idle for 4 min"  # the history goes on


def test_a_text_row_is_kept_at_once_for_a_new_headline_and_every_5_min_for_figures(tmp_path):
    """The same text again appends nothing; a new summary or action is kept at once; figures
    alone (savings, evidence) that move every round are kept at most every TEXT_EVERY_S."""
    daemon = recording_daemon(tmp_path, 5.0, ticks=3)
    store = daemon.store
    assert store is not None
    rec = {"id": "r", "rule": "spot", "target": "host", "summary": "use spot",
           "savings_per_month": 100.0, "evidence_seconds": 60.0}

    def at(ts: float, **changed: Any) -> None:
        facts.write_recommendations(store, [dict(rec, last_seen=ts, **changed)], ts)

    at(T0 + 1)
    at(T0 + 2, evidence_seconds=65.0)  # bookkeeping only
    at(T0 + 3, savings_per_month=90.0)  # figures, within TEXT_EVERY_S
    at(T0 + 3.5, savings_per_month=90.0, snoozed_until=time.time() + 3600)
    at(T0 + 4, summary="use spot now")  # a new headline: at once
    every = facts.TEXT_EVERY_S
    at(T0 + every, summary="use spot now", savings_per_month=80.0)  # figures, just too soon
    at(T0 + 4 + every, summary="use spot now", savings_per_month=70.0)  # figures, in time
    at(T0 + 10 + every, summary="use spot now", savings_per_month=70.0)  # the same again
    store.close()
    conn = sqlite3.connect(tmp_path / "mlcost.db")
    try:
        rows = conn.execute("SELECT ts, savings_per_month FROM recommendation_texts "
                            "ORDER BY ts").fetchall()
        kept = conn.execute("SELECT body FROM recommendation_texts ORDER BY ts").fetchall()
    finally:
        conn.close()
    assert rows == [(round((T0 + t) * 1000), v) for t, v in ((1, 100.0), (4, 100.0),
                                                            (4 + every, 70.0))]
    # kept compressed (a body is kilobytes of JSON), and read back as written
    assert all(isinstance(body, bytes) for (body,) in kept)
    assert json.loads(unpack_text(kept[-1][0]))["summary"] == "use spot now"


def test_a_replay_of_the_tick_new_advice_was_found_on_shows_it(tmp_path):
    """The rules run between ticks: a round that starts a quarter second after tick T finds
    advice in the samples up to T (the book's first and last seen), and /v1/now serves it with
    tick T. The store counted it from the round's start instead, so a replay of tick T, what
    the live view showed, lacked it (test_snapshot_live's replay, run alone: the demo's first
    advice)."""
    daemon = recording_daemon(tmp_path, 5.0, ticks=3)  # ticks at T0 + 1, 2, 3
    store = daemon.store
    assert store is not None
    tick = T0 + 3
    found = {"id": "r", "rule": "spot", "target": "host", "summary": "use spot",
             "savings_per_month": 100.0, "first_seen": tick, "last_seen": tick}
    facts.write_recommendations(store, [found], tick + 0.25)  # the round's start
    store.close()
    with Replay(tmp_path / "mlcost.db") as replay:
        shown = replay.state_at(tick)
    assert shown["ts"] == pytest.approx(tick, abs=0.002)
    assert [(r["id"], r["summary"]) for r in shown["recommendations"]] == [("r", "use spot")]
    assert shown["recommendations"][0]["first_seen"] == pytest.approx(tick, abs=0.002)


def test_a_recommendation_let_go_live_is_not_replayed_after_it_went(mlcostd):
    """The idle notebook is stopped: the live view lets its advice go at the next round (its
    process exited) and says so. Replay showed it for up to 90 s more (the grace after its last
    sighting, for the rounds between sightings), as if it still stood."""
    daemon = mlcostd("idle-host", interval=0.5, config=IDLE_CONFIG)
    poll(lambda: any(r["rule"] == RULE for r in daemon.now().get("recommendations") or []),
         ADVICE_TIMEOUT_S, f"the {RULE} advice", every=0.5, explain=daemon.log_tail)
    [notebook] = daemon.workload_pids()
    os.kill(notebook, signal.SIGKILL)
    went: list[float] = []

    def resolved() -> bool:
        conn = sqlite3.connect(f"file:{daemon.db}?mode=ro", uri=True)
        try:
            went[:] = [r[0] / 1000 for r in conn.execute(
                "SELECT ended_at FROM events WHERE kind = 'recommendation_resolved' "
                "AND target LIKE ? AND ended_at IS NOT NULL", (f"{RULE} %",))]
        finally:
            conn.close()
        return bool(went)

    poll(resolved, ADVICE_TIMEOUT_S, f"the {RULE} advice resolved", every=0.5,
         explain=daemon.log_tail)
    daemon.wait_for_ticks(len(daemon.ticks()) + 4)  # ticks after it went
    assert daemon.stop() == 0, daemon.log_tail()
    [resolved_at] = went
    with Replay(daemon.db) as replay:
        last_seen = next(r["last_seen"] for r in queries.recommendations(replay.reader, 0.0)
                         if r["rule"] == RULE)
        assert last_seen < resolved_at < last_seen + 90  # within the grace: shown before
        standing = [t for t in replay.times() if t <= last_seen]
        gone = [t for t in replay.times() if t >= resolved_at]
        assert standing and gone
        assert RULE in [r["rule"] for r in replay.state_at(standing[-1])["recommendations"]]
        for t in gone:
            assert RULE not in [r["rule"] for r in replay.state_at(t)["recommendations"]]
