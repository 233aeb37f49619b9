"""`mlcostd prices --observed`: the selection matrix from what a recorded workload needed."""

import json
import sqlite3
import time

import pytest

from daemon.analysis.selection import observed_need, selection_matrix
from daemon.commands.cli import main
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from pricing import Catalog

GIB = 1 << 30


def record(path, ticks=120, ended_ago=0.0):
    """A host where pid 100 trains on GPUs 0-1 (peak 30 GiB) and pid 200 holds GPU 2 idly,
    until `ended_ago` seconds ago."""
    store = Store(str(path))
    start = time.time() - ended_ago - ticks
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


def test_processes_sharing_a_gpu_need_what_they_hold_together(tmp_path):
    """Four working processes of 6 GiB each on one GPU need 24 GiB of it (25 at the tick one
    held 7): the need said 7 (the largest process's peak) and ranked GPUs too small to hold
    them."""
    path = tmp_path / "x.db"
    store = Store(str(path))
    start = time.time() - 60
    for tick in range(1, 31):
        procs = tuple(ProcessSample(300 + i, start - 100 + i, 1, "carol", f"python shard.py {i}",
                                    gpus=(GpuUse(0, (6 + (tick == 20 and i == 0)) * GIB, 60.0),))
                      for i in range(4))
        gpus = (GpuSample(0, "GPU-0", "NVIDIA A100-SXM4-40GB", utilization=90.0,
                          memory_total_bytes=40 * GIB),)
        store.write(Sample(ts=start + tick, tick=tick, gpus=gpus, processes=procs))
    store.close()
    reader = Store.reader(str(path))
    try:
        need = observed_need(reader, 3600)
        one = observed_need(reader, 3600, pid=301)
    finally:
        reader.close()
    assert need.gpus == 1 and need.peak_gib_per_gpu == pytest.approx(25.0)  # 7 + 3 x 6 at tick 20
    assert one.peak_gib_per_gpu == pytest.approx(6.0)
    fits = {row["gib_per_gpu"] for row in selection_matrix(need, Catalog.load(), limit=50)}
    assert fits and min(fits) >= 25.0 * 1.1


def test_a_recording_that_ended_hours_ago_is_read_over_its_own_end_or_until(tmp_path, capsys):
    """A copy or snapshot read later: the window ends at its last sample (as the report's),
    and --until moves it, checked like the report's."""
    path = tmp_path / "x.db"
    record(path, ended_ago=3 * 3600)
    assert main(["prices", "--observed", "--db", str(path), "--json", "--provider", "aws"]) == 0
    assert json.loads(capsys.readouterr().out)["need"]["gpus"] == 2
    before = time.time() - 5 * 3600
    assert main(["prices", "--observed", "--db", str(path), "--since", "1h", "--until",
                 str(before)]) == 1
    assert "no GPU process" in capsys.readouterr().err
    assert main(["prices", "--observed", "--db", str(path), "--until", "tomorrow"]) == 2
    assert "--until" in capsys.readouterr().err


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
    assert "g6e.12xlarge" in [r["instance_type"] for r in rows]  # 4 x L40S 48 GiB


def test_cli_json_and_errors(tmp_path, capsys):
    path = tmp_path / "x.db"
    record(path)
    assert main(["prices", "--observed", "--db", str(path), "--json", "--provider", "aws"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["need"]["gpus"] == 2 and document["instances"]
    assert main(["prices", "--observed", "--db", str(tmp_path / "none.db")]) == 2  # nothing to read: a refusal
    assert "no database" in capsys.readouterr().err
    assert main(["prices", "--kind", "training"]) == 2
    assert "--kind goes with --observed" in capsys.readouterr().err


def test_the_table_says_every_prices_source_and_age_and_reads_the_cache(tmp_path, capsys):
    import time

    from pricing.cache import CachedPrice, write_cache

    path = tmp_path / "x.db"
    record(path)
    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "g6e.12xlarge", "on-demand", 9.99,
                                    time.time() - 120, "test refresh")])
    assert main(["prices", "--observed", "--db", str(path), "--provider", "aws", "--cache",
                 str(cache), "--kind", "online_inference"]) == 0
    out = capsys.readouterr().out
    table, notes = out.split("prices (spot is the midpoint of the zones' range):\n")
    row = next(line for line in table.splitlines() if " g6e.12xlarge " in line)
    assert "$9.9900" in row and "on-demand" in row  # the cached live price, not 10.49264
    ref = row.rsplit("[", 1)[1].rstrip("]")
    assert notes.splitlines()[int(ref) - 1].endswith(
        "on-demand: test refresh (live, 2 min old)")


SPECIALTY = {"Inferentia2", "Trainium", "Trainium2", "TPU-v5e", "TPU-v5p", "TPU-v6e"}


def small_need(gpus=1):
    from daemon.analysis.selection import Need

    return Need("test", gpus=gpus, peak_gib_per_gpu=12.0, run_hours=10.0,
                run_hours_source="x", gpu_models=("NVIDIA A100-SXM4-40GB",))


def test_specialty_rows_carry_dates_sources_and_what_moving_costs_never_a_run_cost():
    from daemon.analysis.selection import KIND_ORDER, kind_matrix

    catalog = Catalog.load()
    seen = set()
    for kind in KIND_ORDER:
        for row in kind_matrix(small_need(), catalog, kind, limit=50)["specialty"]:
            seen.add(row["accelerator"])
            assert row["cost"] is None and "not comparable" in row["assumes"]
            assert row["price_source"].startswith(row["lifecycle"] + ": SkyPilot catalogs/")
            assert "catalog date unknown" in row["price_source"]  # dated like every row
            assert row["migration"].startswith("moving costs: ")
            if row["accelerator"].startswith(("Inferentia", "Trainium")):
                assert "Neuron SDK" in row["migration"] and "CUDA code does not run" in \
                    row["migration"] and "model families" in row["migration"]
            else:
                assert "XLA compilation" in row["migration"]
                assert "vLLM's TPU backend" in row["migration"]
    assert seen == SPECIALTY
    trn2 = Catalog.load().by_instance("aws", "trn2.48xlarge")
    assert trn2 is not None and trn2.spot is None  # no spot price is known: none is shown


def test_each_kind_ranks_by_what_it_buys():
    from daemon.analysis.selection import kind_matrix

    catalog = Catalog.load()
    need = small_need(gpus=2)
    training = kind_matrix(need, catalog, "training", limit=200)
    batch = kind_matrix(need, catalog, "batch_inference", limit=200)
    online = kind_matrix(need, catalog, "online_inference", limit=200)
    # training: one host with both GPUs, the cost of a 10 h run, at spot where listed
    assert all(r["accelerators"] >= 2 for r in training["gpus"])
    for row in training["gpus"]:
        offer = catalog.by_instance(row["provider"], row["instance_type"], row["region"])
        assert row["lifecycle"] == ("spot" if offer.spot is not None else "on-demand")
    assert all(r["cost"] == pytest.approx(r["per_hour"] * 10, abs=0.01) for r in training["gpus"])
    # batch: the same 20 accelerator-hours anywhere, so one-GPU hosts count and the price per
    # accelerator-hour ranks
    assert any(r["accelerators"] == 1 for r in batch["gpus"])
    assert all(r["cost"] == pytest.approx(r["per_accelerator_hour"] * 20, abs=0.01)
               for r in batch["gpus"])
    # online: a month on demand or committed, never spot
    assert {r["lifecycle"] for r in online["gpus"]} <= {"on-demand", "commit-1y", "commit-3y"}
    assert all(r["cost"] == pytest.approx(r["per_hour"] * 730, abs=0.01) for r in online["gpus"])
    for section in (training, batch, online):
        costs = [r["cost"] for r in section["gpus"]]
        assert costs == sorted(costs)
    tops = [[r["instance_type"] for r in s["gpus"][:5]] for s in (training, batch, online)]
    assert tops[0] != tops[1] != tops[2] != tops[0]
    # specialty by kind: Inferentia serves, never trains; TPU v5p trains only
    assert "Inferentia2" not in {r["accelerator"] for r in training["specialty"]}
    assert "TPU-v5p" in {r["accelerator"] for r in training["specialty"]}
    assert "TPU-v5p" not in {r["accelerator"] for r in online["specialty"]}
    assert "Inferentia2" in {r["accelerator"] for r in online["specialty"]}
    assert "assumes the work takes as long as it did here (10.00 h on NVIDIA A100-SXM4-40GB)" \
        in training["gpus"][0]["assumes"]


def test_the_recorded_kinds_choose_the_matrices_and_the_text_names_the_moving_costs(tmp_path,
                                                                                    capsys):
    from daemon.analysis.kinds import Kind
    from daemon.store import facts

    path = tmp_path / "x.db"
    record(path)
    with sqlite3.connect(path) as db:
        start = db.execute("SELECT start_ms FROM processes WHERE pid = 100").fetchone()[0]
    store = Store(str(path))
    facts.write_process_kinds(store, {(100, start / 1000): Kind("training", 0.9).as_dict()},
                              time.time())
    store.close()
    assert main(["prices", "--observed", "--db", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["need"]["kinds"] == ["training"]
    assert [s["kind"] for s in document["kinds"]] == ["training"]
    assert document["ranked_for"] == "the kinds recorded for its processes"
    assert main(["prices", "--observed", "--db", str(path), "--kind", "all"]) == 0
    out = capsys.readouterr().out
    for kind in ("training", "batch_inference", "online_inference"):
        assert f"\n{kind}: ranked by " in out
    assert "trn1.32xlarge" in out and "tpu-v5p-8" in out and "inf2.48xlarge" in out
    assert "AWS Neuron: moving costs: the AWS Neuron SDK" in out
    assert "Google TPU (XLA): moving costs: XLA compilation" in out
    assert "GPU rows' run cost assumes the work takes as long as it did here" in out


def test_each_recorded_kind_is_ranked_for_what_its_own_processes_needed(tmp_path, capsys):
    from daemon.analysis.kinds import Kind
    from daemon.store import facts

    path = tmp_path / "x.db"
    record(path)  # pid 100: 2 GPUs, peak 30 GiB; pid 200: 1 GPU, 12 GiB, idle
    with sqlite3.connect(path) as db:
        starts = dict(db.execute("SELECT pid, start_ms FROM processes").fetchall())
    store = Store(str(path))
    facts.write_process_kinds(store, {(100, starts[100] / 1000): Kind("training", 0.9).as_dict(),
                                      (200, starts[200] / 1000):
                                      Kind("online_inference", 0.9).as_dict()}, time.time())
    store.close()
    reader = Store.reader(str(path))
    try:
        serving = observed_need(reader, 3600, kind="online_inference")
        with pytest.raises(ValueError, match="no GPU process recorded as batch_inference"):
            observed_need(reader, 3600, kind="batch_inference")
    finally:
        reader.close()
    assert serving.gpus == 1 and serving.peak_gib_per_gpu == pytest.approx(12)
    assert serving.what == "its online_inference processes"
    # The host's need: only the working trainer (the idle server is not part of it), so only
    # training is ranked by default; --kind picks another.
    assert main(["prices", "--observed", "--db", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [s["kind"] for s in document["kinds"]] == ["training"]
    assert document["kinds"][0]["need"]["gpus"] == 2
