"""The replay source is read from worker threads that can overlap (a newer `]` does not wait for
an older read to finish): concurrent reads must neither fail nor hang. Without the source's lock
two reads on the replay's one SQLite connection deadlock the interpreter, so the readers run in a
child process that the test can time out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.tui.test_replay_imports import build_store

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 60.0  # the readers stop after ~1 s; this long means they hung

CONCURRENT_READERS = """
import json, random, sys, threading, time
from mlcost_tui.sources import ReplaySource, open_replay

source = ReplaySource(open_replay(sys.argv[1]))
errors, reads = [], [0] * 4

def read_for_a_while(reader):
    rng = random.Random(reader)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        snap = source.read(rng.choice(source.times))
        reads[reader] += 1
        if snap.error is not None:
            errors.append(snap.error)

threads = [threading.Thread(target=read_for_a_while, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
source.close()
print(json.dumps({"errors": errors[:5], "reads": reads}))
"""


def test_concurrent_replay_reads_neither_fail_nor_hang(tmp_path):
    store = tmp_path / "recorded.db"
    build_store(store, ticks=40)
    try:
        result = subprocess.run([sys.executable, "-c", CONCURRENT_READERS, str(store)], cwd=ROOT,
                                capture_output=True, text=True, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"concurrent replay reads hung for {HANG_S:.0f} s") from None
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    assert all(report["reads"])
