"""Writing output on the critical path: a process that stops its GPU work to serialize and write
logs, metrics, predictions or embeddings (the `output` phase, daemon.analysis.phases), with the
patch that takes the writing off the loop. Distinct from checkpoints (rules/phases.py
blocking_checkpoint, whose cadence feeds the spot advice) and from input preprocessing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from daemon.analysis.rules.base import Rule
from daemon.analysis.rules.phases import _phase_rule
from daemon.analysis.rules.window import Analysis, ProcessWindow
from daemon.wire import OUTPUT
from pricing.offer import HOURS_PER_MONTH

# The PyTorch profiler's 5% rule, as for checkpoints and host syncs (our choice by analogy):
# a log line per step is well under it; a record per example with an fsync is not.
OUTPUT_SHARE = 0.05


def _output_patch(proc: ProcessWindow, a: Analysis, where: str,
                  stacks: Sequence[Mapping[str, Any]]) -> str:
    return (f"# {where}: the loop stops to serialize and write its records.\n"
            "# Buffer them and write from a thread, and less often:\n"
            "+import queue, threading\n"
            "+records = queue.Queue(maxsize=10_000)\n"
            "+def writer():\n"
            "+    with open(path, 'a') as fh:\n"
            "+        while True:\n"
            "+            batch = [records.get()]\n"
            "+            while not records.empty() and len(batch) < 1000:\n"
            "+                batch.append(records.get())\n"
            "+            fh.write(''.join(json.dumps(r) + '\\n' for r in batch))\n"
            "+threading.Thread(target=writer, daemon=True).start()\n"
            "-fh.write(json.dumps(record) + '\\n'); os.fsync(fh.fileno())\n"
            "+records.put(record)            # the loop only queues\n"
            "# fsync once per N records (or per epoch), not per record; log aggregates, not every\n"
            "# example; for predictions/embeddings write a binary format (npy, Parquet) in chunks.\n")


WRITING_OUTPUT = Rule(
    "writing_output", "output share of the window",
    f"> {OUTPUT_SHARE:.0%} (PyTorch profiler rule, by analogy)",
    "phase share, the json/csv/logging frames or the write line, top stacks",
    "buffer the records, write them from a thread, write (and fsync) less often",
    f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(OUTPUT, OUTPUT_SHARE, _output_patch, "writing output",
                "buffer it, write asynchronously, write less often"))
