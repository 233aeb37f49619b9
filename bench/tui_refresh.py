"""mlcost-top's UI cost: one refresh with 500 processes and 8 GPUs (target <= 30 ms) and the time
from start to the first frame (target <= 1.5 s). Headless (Textual's test driver); prints figures.

    .venv/bin/python bench/tui_refresh.py
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import asyncio  # noqa: E402
import statistics  # noqa: E402

from daemon.wire import Now, process_key  # noqa: E402
from mlcost_tui.app import MlcostTop  # noqa: E402
from mlcost_tui.messages import HostSnapshot, SnapshotArrived  # noqa: E402

GPUS, PROCESSES, REFRESHES = 8, 500, 30
GIB = 1 << 30


def document(step: int) -> dict:
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3",
             "utilization": float((i * 13 + step * 7) % 101), "memory_used_bytes": 40 * GIB,
             "memory_total_bytes": 80 * GIB, "power_watts": 300.0, "temperature_c": 60}
            for i in range(GPUS)]
    procs = [{"key": process_key(10000 + i, 1.7e9), "pid": 10000 + i, "start_time": 1.7e9,
              "ppid": 10000 + (i // 8) * 8 if i % 8 else 1, "user": f"user{i % 17}",
              "command": f"/usr/bin/python3 -m train.job_{i} --lr 0.1",
              "gpus": [{"index": i % GPUS, "memory_bytes": GIB, "sm_share": float(i % 50)}],
              "gpu_memory_bytes": GIB, "sm_share": float((i + step) % 50),
              "cpu_percent": float((i * 3 + step) % 400), "rss_bytes": GIB,
              "io_wait_percent": float((i + step) % 30), "state": "S",
              "burn_per_hour": ((i + step) % 97) / 10, "cost": i / 3,
              "phases": {"compute": {"share": 0.7}, "data_wait": {"share": 0.3}}}
             for i in range(PROCESSES)]
    return {"ts": 1.7e9 + step, "tick": step, "host": {"hostname": "bench"}, "gpus": gpus,
            "processes": procs, "burn": {"total_per_hour": 98.3, "wasted_per_hour": 20.0}}


def snapshot(step: int) -> SnapshotArrived:
    return SnapshotArrived((HostSnapshot("bench", Now.from_dict(document(step)), None, 0.01,
                                         time.time()),))


async def main() -> None:
    app = MlcostTop([], poll=False)
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(snapshot(0))
        await pilot.pause()
        first_frame = time.perf_counter() - STARTED
        applied, walls = [], []
        for step in range(1, REFRESHES + 1):
            message = snapshot(step)  # parsing happens in the worker, not the UI: not timed
            began = time.perf_counter()
            app.post_message(message)
            await pilot.pause()
            walls.append(time.perf_counter() - began)
            applied.append(app.render_seconds)
    ms = 1000
    print(f"{PROCESSES} processes, {GPUS} GPUs, {REFRESHES} refreshes (every cell changing "
          "sort order too)")
    print(f"  apply one snapshot (batch_update of every panel): median "
          f"{statistics.median(applied) * ms:.1f} ms, max {max(applied) * ms:.1f} ms "
          f"(target <= 30 ms)")
    print(f"  message to next idle, incl. layout and paint: median "
          f"{statistics.median(walls) * ms:.1f} ms, max {max(walls) * ms:.1f} ms")
    print(f"  start to first frame with data: {first_frame:.2f} s (target <= 1.5 s)")


if __name__ == "__main__":
    asyncio.run(main())
