"""`mlcostd report --json` lists the recommendations seen in its range, each as its last
sighting wrote it: a SIGTERM the live view dropped when its process worked again stayed listed
as an active SIGTERM (probe 143 F8). One the live view let go by the range's end (its resolved
notice after its last sighting) says "resolved" and when; a resolved SIGTERM's kill is
withdrawn. Other advice keeps its action. A real store, written as the daemon writes it."""

from __future__ import annotations

from daemon.analysis.book import RESOLVED
from daemon.commands.report import (
    _evidence_note,
    _recommendations_review,
    _render_recommendations,
    _with_resolutions,
)
from daemon.store import facts, queries
from daemon.store.reader import StoreReader
from tests.daemon.scripted import T0, recording_daemon


def kill(rec_id: str, pid: int) -> dict:
    return {"id": rec_id, "rule": "idle_gpu_held", "target": f"{pid}:1.000",
            "summary": f"pid {pid} holds GPU 0 idle", "savings_per_month": 500.0,
            "action": {"kind": "sigterm", "pid": pid, "start_time": 1.0, "signal": "SIGTERM"},
            "status": "active"}


def notice(rec: dict, at: float) -> dict:
    return {"id": f"{RESOLVED}:{rec['id']}:{at:.3f}", "kind": RESOLVED,
            "target": f"{rec['rule']} {rec['target']}", "started_at": T0 + 1, "ended_at": at,
            "cost_so_far": None, "recommendation_id": rec["id"], "rule": rec["rule"],
            "detail": "resolved: test"}


def reported(tmp_path) -> dict[str, dict]:
    """k1 and p1 resolved by the range's end (T0 + 20), k2 seen again after its notice, k3
    resolved after the range: the recommendations as the report reads them."""
    daemon = recording_daemon(tmp_path, 5.0, ticks=3)
    store = daemon.store
    assert store is not None
    went, back, later = kill("k1", 41), kill("k2", 42), kill("k3", 43)
    patch = {"id": "p1", "rule": "over_provisioned", "target": "host", "summary": "shrink",
             "savings_per_month": 900.0, "status": "active",
             "action": {"kind": "copy_commands", "text": "look", "commands": []}}
    facts.write_recommendations(store, [went, back, later, patch], T0 + 10)
    for event in (notice(went, T0 + 15), notice(back, T0 + 5),  # (back: seen after it)
                  notice(later, T0 + 30), notice(patch, T0 + 15)):
        facts.write_event(store, event, raised_at=event["ended_at"])
    store.close()
    reader = StoreReader(str(tmp_path / "mlcost.db"))
    try:
        return {r["id"]: r for r in _with_resolutions(
            reader, queries.recommendations(reader, T0), T0 + 20)}
    finally:
        reader.close()


def test_a_resolved_sigterm_is_reported_resolved_with_its_kill_withdrawn(tmp_path):
    found = reported(tmp_path)
    assert found["k1"]["status"] == "resolved"
    assert abs(found["k1"]["resolved_at"] - (T0 + 15)) < 0.01  # (the store keeps ms)
    assert found["k1"]["action"]["kind"] == "advice", found["k1"]["action"]
    assert "no SIGTERM: withdrawn" in found["k1"]["action"]["text"]
    assert "; resolved " in _evidence_note(found["k1"])
    for rec_id in ("k2", "k3"):  # back after its notice; resolved after the range
        assert found[rec_id]["status"] == "active" and found[rec_id]["action"]["kind"] == \
            "sigterm", found[rec_id]
    assert found["p1"]["status"] == "resolved" and found["p1"]["action"]["kind"] == \
        "copy_commands"


def test_resolved_advice_is_listed_but_not_counted_in_the_potential_savings(tmp_path):
    """The potential savings is what is left to save: a recommendation resolved by the range's
    end has nothing left, so only k2 and k3 ($500 each, both on host-wide targets of their own)
    are combined; k1 and p1 are listed after them with their own figure, marked."""
    found = reported(tmp_path)
    price = {"per_hour": 32.0}
    review = _recommendations_review(list(found.values()), price, [{"index": 0}])
    savings = review["savings"]
    assert savings["resolved"] == 2
    assert savings["standalone_sum_per_month"] == 1000.0, savings
    assert 0 < savings["potential_per_month"] <= 1000.0, savings
    listed = [r["id"] for r in review["recommendations"]]
    assert sorted(listed[:2]) == ["k2", "k3"] and sorted(listed[2:]) == ["k1", "p1"], listed
    assert all(r["combined_savings_per_month"] is None for r in review["recommendations"][2:])
    text = "\n".join(_render_recommendations(review["recommendations"], savings))
    assert "not counted: 2 resolved by the range's end" in text, text
    assert text.count("while it lasted, not counted") == 2, text
