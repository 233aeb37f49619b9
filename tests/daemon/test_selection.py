"""`mlcostd prices --observed`: the selection matrix from what a recorded workload needed."""

import json
import time

import pytest

from daemon.analysis.selection import observed_need, selection_matrix
from daemon.commands.cli import main
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from pricing import Catalog

GIB = 1 << 30


def record(path, ticks=120):
    """A host where pid 100 trains on GPUs 0-1 (peak 30 GiB) and pid 200 holds GPU 2 idly."""
    store = Store(str(path))
    start = time.time() - ticks
    for tick in range(1, ticks + 1):
        memory = (20 + 10 * (tick == 60)) * GIB  # one peak at 30 GiB
        train = ProcessSample(100, start - 3600, 1, "alice", "python train.py",
                              gpus=(GpuUse(0, memory, 80.0), GpuUse(1, 20 * GIB, 75.0)))
        idle = ProcessSample(200, start, 1, "bob", "jupyter", gpus=(GpuUse(2, 12 * GIB, 0.0),))
        gpus = tuple(GpuSample(i, f"GPU-{i}", "NVIDIA A100-SXM4-40GB", utilization=50.0,
                               memory_total_bytes=40 * GIB) for i in range(4))
        store.write(Sample(ts=start + tick, tick=tick, gpus=gpus, processes=(train, idle)))
    store.close()


def test_need_counts_working_gpus_and_peak_memory(tmp_path):
    path = tmp_path / "x.db"
    record(path)
    reader = Store.reader(str(path))
    need = observed_need(reader, 3600)
    assert need.gpus == 2  # the idle holder of GPU 2 is not part of the need
    assert need.peak_gib_per_gpu == pytest.approx(30.0)
    assert need.run_hours == pytest.approx(1 + 120 / 3600, abs=0.01)  # started an hour earlier
    one = observed_need(reader, 3600, pid=200, run_hours=5)
    assert one.gpus == 1 and one.peak_gib_per_gpu == pytest.approx(12) and one.run_hours == 5
    with pytest.raises(ValueError, match="pid 999"):
        observed_need(reader, 3600, pid=999)
    reader.close()


def test_matrix_fits_and_prices_a_run():
    from daemon.analysis.selection import Need

    need = Need("test", gpus=2, peak_gib_per_gpu=30.0, run_hours=10.0, run_hours_source="x")
    rows = selection_matrix(need, Catalog.load(), provider="aws")
    assert rows
    for row in rows:
        assert row["gpus"] >= 2 and row["gib_per_gpu"] >= 33.0
        assert row["run_cost_on_demand"] == pytest.approx(row["on_demand_per_hour"] * 10)
    costs = [r["on_demand_per_hour"] for r in rows]
    assert costs == sorted(costs)
    assert "g6e.12xlarge" in [r["instance_type"] for r in rows]  # 4 x L40S 45 GiB


def test_cli_json_and_errors(tmp_path, capsys):
    path = tmp_path / "x.db"
    record(path)
    assert main(["prices", "--observed", "--db", str(path), "--json", "--provider", "aws"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["need"]["gpus"] == 2 and document["instances"]
    assert main(["prices", "--observed", "--db", str(tmp_path / "none.db")]) == 1
    assert "no database" in capsys.readouterr().err


def test_the_table_says_every_prices_source_and_age_and_reads_the_cache(tmp_path, capsys):
    import time

    from pricing.cache import CachedPrice, write_cache

    path = tmp_path / "x.db"
    record(path)
    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "g6e.12xlarge", "on-demand", 9.99,
                                    time.time() - 120, "test refresh")])
    assert main(["prices", "--observed", "--db", str(path), "--provider", "aws", "--cache",
                 str(cache)]) == 0
    out = capsys.readouterr().out
    table, notes = out.split("prices (spot is the midpoint of the zones' range):\n")
    row = next(line for line in table.splitlines() if " g6e.12xlarge " in line)
    assert "$9.9900" in row  # the cached live price, not the bundled 10.49264
    refs = row.rsplit("[", 1)[1].rstrip("]").split(",")
    lines = notes.splitlines()
    assert lines[int(refs[0]) - 1].endswith("on-demand: test refresh (live, 2 min old)")
    assert lines[int(refs[1]) - 1].startswith(f"  [{refs[1]}] spot: SkyPilot")
