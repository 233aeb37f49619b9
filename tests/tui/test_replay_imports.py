"""`mlcost-top --replay FILE` runs on a laptop with a copy of a store: it must not load NVML
(pynvml), psutil or the store's writer. A fresh interpreter opens a replay of a small store built
here, through the path --replay takes (cli's parser, sources.open_replay, the App rendering the
first recorded tick), and reports which modules it loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
NOT_FOR_REPLAY = ("pynvml", "psutil", "daemon.store.writer")

REPLAY_IN_A_FRESH_INTERPRETER = """
import asyncio, json, sys
from mlcost_tui import cli
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.sources import open_replay

args = cli.build_parser().parse_args(["--replay", sys.argv[1]])

async def first_tick():
    app = MlcostTop([], poll=False, replay=open_replay(args.replay))
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        return {"hostname": app.now.hostname if app.now else None,
                "processes": app.query_one(ProcessPanel).row_count}

shown = asyncio.run(first_tick())
print(json.dumps({"shown": shown, "modules": sorted(sys.modules)}))
"""


def build_store(path: Path, ticks: int = 3) -> None:
    with Store(path) as store:
        store.set_meta("host", {"hostname": "recorded-box", "interval_s": 1.0})
        for tick in range(1, ticks + 1):
            store.write(Sample(
                ts=T0 + tick, tick=tick,
                gpus=(GpuSample(index=0, uuid="GPU-a", name="H100", utilization=50.0,
                                memory_used_bytes=1 << 30, memory_total_bytes=80 << 30),),
                processes=(ProcessSample(pid=42, start_time=T0 - 5, ppid=1, user="bob",
                                         command="python train.py",
                                         gpus=(GpuUse(0, 1 << 30, 50.0),),
                                         cpu_seconds=float(tick)),)))


def test_replay_loads_neither_nvml_psutil_nor_the_store_writer(tmp_path):
    store = tmp_path / "recorded.db"
    build_store(store)
    result = subprocess.run([sys.executable, "-c", REPLAY_IN_A_FRESH_INTERPRETER, str(store)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["shown"] == {"hostname": "recorded-box", "processes": 1}  # the path really ran
    loaded = [m for m in report["modules"]
              if any(m == name or m.startswith(name + ".") for name in NOT_FOR_REPLAY)]
    assert loaded == []
