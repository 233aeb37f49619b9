"""What a job's processes send each other through pipes is no output: a multiprocessing Pool's
workers pickle their results into a pipe the parent reads, and each side's write syscalls
(wchar) less its reads (rchar) looked like bytes sent out. Added per worker to the parent's,
never netted against the parent's reads of the same pipe, a job that wrote no file read as
checkpointing: blocking_checkpoint "now every 17 s" (probe 144 F5). A child's file write, or
what it sends out of the job, still counts."""

from __future__ import annotations

import asyncio
from typing import Any

from daemon.analysis.host_signals import WRITE_MIN_PER_S
from daemon.config import AttributionConfig
from daemon.runtime.attribution import Attribution
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store

MB = 1_000_000
PARENT, START = 70_000, 1000.0


def signals_after(tmp_path: Any, parent_io: dict[str, int],
                  workers_io: list[dict[str, int]]) -> tuple[Any, list[Any]]:
    """The host signals of a GPU process and of each of its children (as workers dumped for
    it) after 4 ticks of 1 s whose counters grow by `parent_io` / `workers_io` a second."""
    store = Store(tmp_path / "mlcost.db")
    attribution = Attribution(AttributionConfig(stacks=False), store, interval_s=1.0)
    gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 90.0, None, 40 << 30, 40 << 30)

    def at(tick: int) -> tuple[ProcessSample, list[ProcessSample]]:
        def grown(io: dict[str, int]) -> dict[str, int]:
            return {name: io.get(name, 0) * tick for name in
                    ("read_bytes", "write_bytes", "read_chars", "write_chars")}
        parent = ProcessSample(PARENT, START, 1, "ann", "python train.py",
                               (GpuUse(0, 1 << 30, 90.0),), cpu_seconds=0.9 * tick,
                               **grown(parent_io))
        workers = [ProcessSample(PARENT + 1 + i, START + 1, PARENT, "ann", "python train.py",
                                 cpu_seconds=0.9 * tick, **grown(io))
                   for i, io in enumerate(workers_io)]
        return parent, workers

    async def run() -> tuple[Any, list[Any]]:
        for tick in range(4):
            parent, workers = at(tick)
            attribution.on_tick(Sample(5000.0 + tick, tick, gpus=(gpu,),
                                       processes=(parent, *workers)))
        said = (attribution.host_signals(parent),
                [attribution.host_signals(w, parent) for w in workers])
        await attribution.stop()
        return said

    try:
        return asyncio.run(run())
    finally:
        store.close()


def test_pool_workers_results_through_a_pipe_to_their_parent_are_not_output(tmp_path):
    # Two workers: each reads 0.5 MB/s of tasks and writes 5 MB/s of results into its pipe;
    # the parent writes the tasks (1 MB/s) and reads the results (10 MB/s). No file written.
    worker = {"read_chars": MB // 2, "write_chars": 5 * MB}
    parent, workers = signals_after(tmp_path, {"read_chars": 10 * MB, "write_chars": 1 * MB},
                                    [worker, worker])
    assert parent.write_per_s < WRITE_MIN_PER_S, parent.write_per_s
    assert parent.write_per_s == 0.0, parent.write_per_s
    assert [w.write_per_s for w in workers] == [0.0, 0.0], [w.write_per_s for w in workers]


def test_a_childs_file_write_or_what_it_sends_out_of_the_job_still_counts(tmp_path):
    # A checkpoint writer child: 20 MB/s to storage; a child streaming 10 MB/s to a socket
    # the parent does not read (another host).
    parent, workers = signals_after(
        tmp_path, {"read_chars": MB // 10},
        [{"write_bytes": 20 * MB, "write_chars": 20 * MB}, {"write_chars": 10 * MB}])
    assert parent.write_per_s >= 29 * MB, parent.write_per_s
    assert workers[0].write_per_s >= 20 * MB, workers[0].write_per_s
    assert workers[1].write_per_s >= 9 * MB, workers[1].write_per_s
