"""Cost of the recommendation round's store write (daemon.store.facts.write_recommendations),
and what the text history costs on disk, in a replay and in retention. Prints figures.

A store with some ticks, then ROUNDS evaluation rounds of N recommendations whose bodies are
the size of real ones (an idle-GPU finding is ~2.5 kB of JSON): in "changing" rounds every
body's evidence moves on (what the idle rules do every round), in "steady" rounds only
last_seen and the evidence time do. Reports the wall and CPU time per round, the file's growth,
then (where the store keeps texts) one replay's recommendations at a tick, and one retention
delete of the texts. Runs against whatever `daemon` is importable, so the same script measures
the code before a change (PYTHONPATH=an older checkout) and after.

usage: python bench/recommendation_writes.py [--recommendations 20] [--rounds 720]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from daemon.store import facts
from daemon.store.writer import Store

T0 = 1_750_000_000.0
EVERY_S = 30.0  # [cost].evaluate_every's default


def body(n: int, round_: int, changing: bool) -> dict[str, Any]:
    """One recommendation as the rules and the book write it (sizes as an idle-GPU finding)."""
    moved = round_ if changing else 0
    waiting = [{"file": f"/srv/project/notebooks/train_{n}.py", "line": 24 + k,
                "function": "wait_for_input", "reason": "waiting in select (selectors.py:468)"}
               for k in range(3)]
    return {
        "id": f"idle_gpu_held:{n}", "rule": "idle_gpu_held", "target": f"{1000 + n}:1.000",
        "summary": f"pid {1000 + n} (alice: notebook) holds GPU {n % 8} (12.0 GiB) idle for "
                   f"{moved // 2} min, burning $4.10/h",
        "savings_per_month": 2993.0 + moved * 0.1, "method": "burn x 730 h/month " * 6,
        "evidence": {"window": {"start": T0, "end": T0 + moved * EVERY_S,
                                "seconds": moved * EVERY_S},
                     "idle_seconds": 10.0 + moved * EVERY_S, "utilization_mean": 5.0 / (1 + moved),
                     "phases": {"idle": {"share": 0.9, "seconds": moved * 27.0}},
                     "no_sign_of_work": {"idle_share": 0.9, "waiting_in": waiting}},
        "action": {"kind": "sigterm", "pid": 1000 + n, "start_time": 1.0,
                   "text": "release the GPU: close the notebook kernel / job, or send SIGTERM"},
        "combined_savings_per_month": None, "savings_order": 1, "savings_scope": {"gpus": [n]},
        "evidence_seconds": 600.0 + round_ * EVERY_S, "evidence_needed_seconds": None,
        "preliminary": False, "confidence": None, "thresholds_shortened": False,
        "shortened_thresholds": {}, "first_seen": T0, "last_seen": T0 + round_ * EVERY_S,
        "standing_since": None}


def run(count: int, rounds: int, changing: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="mlcost-bench-recs-") as work:
        path = Path(work) / "mlcost.db"
        store = Store(str(path), max_bytes=1 << 34)
        texts = "recommendation_texts" in {r[0] for r in sqlite3.connect(path).execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        store.pragma("wal_checkpoint", "TRUNCATE")
        before = os.path.getsize(path)
        wall, cpu = [], []
        for round_ in range(rounds):
            recs = [body(n, round_, changing) for n in range(count)]
            w, c = time.perf_counter(), time.thread_time()
            facts.write_recommendations(store, recs, T0 + round_ * EVERY_S)
            wall.append(time.perf_counter() - w)
            cpu.append(time.thread_time() - c)
        store.pragma("wal_checkpoint", "TRUNCATE")
        grown = os.path.getsize(path) - before
        wall.sort()
        kind = "changing" if changing else "steady"
        median, p99 = wall[len(wall) // 2] * 1e3, wall[int(len(wall) * 0.99)] * 1e3
        print(f"  {kind:8} {count} recs x {rounds} rounds: per round median {median:.2f} ms "
              f"wall, p99 {p99:.2f} ms, {sum(cpu) / rounds * 1e3:.2f} ms CPU; "
              f"file +{grown / 1e6:.1f} MB")
        if texts:
            rows = sqlite3.connect(path).execute(
                "SELECT count(*) FROM recommendation_texts").fetchone()[0]
            print(f"           recommendation_texts rows: {rows}")
            replay_and_prune(store, path, rounds)
        store.close()


def replay_and_prune(store: Store, path: Path, rounds: int) -> None:
    from daemon.store import queries
    from daemon.store.maintenance import _PRUNE_TEXTS
    from daemon.store.reader import StoreReader

    reader = StoreReader(path)
    at = T0 + rounds // 2 * EVERY_S
    t = time.perf_counter()
    n = 50
    for _ in range(n):
        queries.recommendation_texts(reader, at - 90, at)
    print(f"           a replay tick's texts: {(time.perf_counter() - t) / n * 1e3:.2f} ms")
    reader.close()
    cut = round((T0 + rounds // 2 * EVERY_S) * 1000)
    conn = sqlite3.connect(path)
    t = time.perf_counter()
    with conn:
        deleted = conn.execute(_PRUNE_TEXTS, (cut, cut)).rowcount
    first = time.perf_counter() - t
    t = time.perf_counter()
    with conn:
        conn.execute(_PRUNE_TEXTS, (cut + 30_000, cut + 30_000))
    again = time.perf_counter() - t
    conn.close()
    print(f"           retention: half the texts ({deleted} rows) in {first * 1e3:.1f} ms, "
          f"the next batch's delete {again * 1e3:.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recommendations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=720)  # 6 h at 30 s: the raw retention
    args = parser.parse_args()
    size = len(str(body(0, 1, True)))
    print(f"write_recommendations ({facts.__file__}), bodies ~{size / 1000:.1f} kB:")
    for changing in (True, False):
        run(args.recommendations, args.rounds, changing)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
