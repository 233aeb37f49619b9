"""Per-process energy and carbon (daemon.analysis.energy, pricing.grid): each GPU's measured
power apportioned to its processes (above the idle floor by SM share, the floor by memory held,
an unheld GPU to the host's idle line), summing to the GPU's energy; grams CO2e from the sourced
grid table or the [energy] config; unknown stays unknown. Shown in /v1/now."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path

import pytest

from daemon import config as config_module
from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import HostPrice
from daemon.analysis.energy import EnergyMeter, split_power, window_floors
from daemon.runtime.daemon import Daemon
from daemon.runtime.price_host import build_analyzer
from daemon.sources.sample import GPU_LOST, GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from daemon.wire import Now
from pricing.grid import CONFIG_SOURCE, JOULES_PER_KWH, grid_intensity, grid_table

GIB = 1 << 30
TRAIN = (100, 1000.0)
NOTEBOOK = (200, 2000.0)
PRICE = HostPrice(per_hour=4.0, gpu_count=2, lifecycle="on-demand", instance_type="g5.12xlarge",
                  provider="aws", region="us-east-1", source="test price", as_of=None)


def gpu(index: int, watts: float | None, status: str = "ok") -> GpuSample:
    return GpuSample(index, f"GPU-{index}", "A10G", status=status, utilization=50.0,
                     memory_used_bytes=GIB, memory_total_bytes=24 * GIB, power_watts=watts)


def proc(key: tuple[int, float], *uses: tuple[int, int | None, float],
         command: str = "python train.py", namespace: str = "") -> ProcessSample:
    return ProcessSample(key[0], key[1], 1, "alice", command,
                         gpus=tuple(GpuUse(i, m, s) for i, m, s in uses),
                         owner={"namespace": namespace, "pod": "p-0"} if namespace else {})


def sample(ts: float, gpus: tuple[GpuSample, ...], *procs: ProcessSample) -> Sample:
    return Sample(ts=ts, tick=int(ts), gpus=gpus, processes=procs)


def per_gpu_sum(split) -> float:
    return math.fsum(split.by_process.values()) + split.host_idle_watts


def test_active_power_goes_by_sm_share_and_idle_power_by_memory_held():
    # GPU 0 draws 300 W over a 60 W floor: 240 W active split 3:1 by SM share; 60 W idle
    # split 1:3 by memory held (the notebook holds more and runs nothing).
    tick = sample(1.0, (gpu(0, 300.0),),
                  proc(TRAIN, (0, 2 * GIB, 60.0)), proc(NOTEBOOK, (0, 6 * GIB, 20.0)))
    (split,) = split_power(tick, {"GPU-0": 60.0})
    assert split.by_process[TRAIN] == pytest.approx(240 * 0.75 + 60 * 0.25)
    assert split.by_process[NOTEBOOK] == pytest.approx(240 * 0.25 + 60 * 0.75)
    assert split.host_idle_watts == 0.0
    assert per_gpu_sum(split) == pytest.approx(300.0, rel=1e-12)


def test_a_gpu_no_process_holds_is_the_host_idle_line_and_an_idle_holder_takes_the_floor():
    tick = sample(1.0, (gpu(0, 58.0), gpu(1, 62.0)), proc(NOTEBOOK, (1, 4 * GIB, 0.0)))
    unheld, held = split_power(tick, {"GPU-0": 55.0, "GPU-1": 55.0})
    assert unheld.by_process == {} and unheld.host_idle_watts == 58.0
    # nobody ran kernels on GPU 1: all of its power goes to the one holding its memory
    assert held.by_process == {NOTEBOOK: pytest.approx(62.0)} and held.host_idle_watts == 0.0


def test_without_a_memory_figure_holders_share_equally_and_a_gpu_without_power_adds_nothing():
    tick = sample(1.0, (gpu(0, 100.0), gpu(1, None), gpu(2, 80.0, status=GPU_LOST)),
                  proc(TRAIN, (0, None, 0.0), (2, GIB, 90.0)), proc(NOTEBOOK, (0, None, 0.0)))
    splits = {s.gpu_index: s for s in split_power(tick, {})}
    assert set(splits) == {0, 2}  # GPU 1 has no power reading
    assert splits[0].by_process == {TRAIN: pytest.approx(50.0), NOTEBOOK: pytest.approx(50.0)}
    # a lost GPU runs nothing: its reading goes to whoever holds it
    assert splits[2].by_process == {TRAIN: pytest.approx(80.0)}


def test_joules_per_process_and_the_host_idle_line_sum_to_each_gpus_energy():
    analyzer = Analyzer(PRICE)
    shapes = itertools.cycle([(310.0, 60.0, 10.0), (150.0, 95.0, 0.0), (61.0, 5.0, 40.0)])
    for i in range(1, 40):
        watts, train_sm, notebook_sm = next(shapes)
        procs = [proc(TRAIN, (0, 3 * GIB, train_sm), (1, GIB, 0.0))]
        if i < 30:  # the notebook exits at tick 30: GPU 1 is then the train job's alone
            procs.append(proc(NOTEBOOK, (0, GIB, notebook_sm), command="jupyter lab"))
        gpus = (gpu(0, watts), gpu(1, 70.0 + i % 3), gpu(2, 55.0 + (i % 2)))
        analyzer.update(sample(1000.0 + i * 1.5, gpus, *procs))
    totals = {t.uuid: t.energy_joules for t in analyzer.gpu_totals.snapshot()}
    meter = analyzer.energy
    procs_joules = math.fsum(meter.by_process.values())
    assert procs_joules + meter.host_idle_joules == pytest.approx(math.fsum(totals.values()),
                                                                  rel=1e-12)
    assert meter.host_idle_joules == pytest.approx(totals["GPU-2"], rel=1e-12)  # unheld
    assert meter.by_process[NOTEBOOK] > 0 and meter.by_process[TRAIN] > meter.by_process[NOTEBOOK]
    assert meter.by_job == {"train.py": pytest.approx(meter.by_process[TRAIN]),
                            "jupyter": pytest.approx(meter.by_process[NOTEBOOK])}


def test_v1_nows_per_process_energy_is_each_processs_total_as_a_document():
    # (Analyzer.cost_state reads process_documents: one pass, no EnergyTotal per process)
    meter = EnergyMeter(lambda command, owner: command)
    for ts in (1.0, 2.0, 3.0):
        meter.add(sample(ts, (gpu(0, 200.0 + ts), gpu(1, 90.0)),
                         proc(TRAIN, (0, GIB, 50.0)), proc(NOTEBOOK, (1, GIB, 0.0))), 1.0)
    for grid in (grid_intensity("aws", "us-east-1"), grid_intensity(None, None)):
        whole = {key: total.as_dict(grid) for key, total in meter.processes().items()}
        assert meter.process_documents([TRAIN, NOTEBOOK, (999, 1.0)], grid) == whole
        assert list(whole[TRAIN]) == ["joules", "kwh", "co2e_grams", "watts"]


def test_the_idle_floor_is_the_least_power_seen():
    meter = EnergyMeter(lambda command, owner: command)
    meter.add(sample(1.0, (gpu(0, 200.0),), proc(TRAIN, (0, GIB, 50.0))), 1.0)
    assert meter.floors == {"GPU-0": 200.0}  # first reading: all of it is the floor yet
    meter.add(sample(2.0, (gpu(0, 70.0),)), 1.0)
    meter.add(sample(3.0, (gpu(0, 270.0),), proc(TRAIN, (0, GIB, 50.0))), 1.0)
    assert meter.floors == {"GPU-0": 70.0}
    assert window_floors([sample(1.0, (gpu(0, 90.0),)), sample(2.0, (gpu(0, 65.0),))]) == {
        "GPU-0": 65.0}


def test_carbon_comes_from_the_sourced_table_for_the_detected_region():
    grid = grid_intensity("aws", "us-east-1")
    assert grid.g_per_kwh == pytest.approx(379.07)
    assert "eGRID2020" in grid.source and "annual average" in grid.source and grid.as_of
    assert grid.grams(JOULES_PER_KWH) == pytest.approx(379.07)  # one kWh
    assert grid_intensity("gcp", "us-central1").g_per_kwh == pytest.approx(454.0)
    for provider, region in {(r.provider, r.region) for r in grid_table().values()}:
        row = grid_table()[(provider, region)]
        assert row.source and row.as_of and 0 < row.g_per_kwh < 2000, (provider, region)


def test_carbon_is_unknown_off_cloud_or_for_a_region_the_table_lacks_and_the_config_wins():
    for provider, region in [(None, None), ("lambda", "us-east-1"), ("aws", "mars-1")]:
        grid = grid_intensity(provider, region)
        assert grid.g_per_kwh is None and grid.grams(1e6) is None
        assert "carbon unknown" in grid.source and "[energy]" in grid.source
    own = grid_intensity(None, None, override_g_per_kwh=120.0)
    assert own.g_per_kwh == 120.0 and own.source == CONFIG_SOURCE
    assert grid_intensity("lambda", "us-east-1", override_region="eu-north-1").g_per_kwh == (
        pytest.approx(8.8))


@pytest.mark.parametrize("energy, message", [
    ({"region": "mars-1"}, "is not in the grid table"),
    ({"region": "eastus", "grid_intensity_g_per_kwh": 100}, "keep one"),
    ({"grid_intensity_g_per_kwh": 5000}, "must be between 0 and 2000"),
    ({"grid_intensity_g_per_kwh": "low"}, "must be a number"),
    ({"intensity": 1}, "unknown key [energy].intensity"),
])
def test_a_bad_energy_setting_fails_at_start_naming_the_key_and_the_fix(energy, message):
    with pytest.raises(config_module.ConfigError, match=message.replace("[", r"\[")):
        config_module.from_dict({"energy": energy}, where="mlcost.toml")


def energy_daemon(tmp_path: Path, energy: dict | None = None, ticks: int = 6) -> Daemon:
    """A real Daemon (store, analyzer, document) fed scripted ticks with power readings."""
    config = config_module.from_dict({"daemon": {"db": str(tmp_path / "mlcost.db")},
                                      **({"energy": energy} if energy else {})}, where="test")
    daemon = Daemon(config)
    daemon.store = Store(str(daemon.db))
    daemon.host = {"hostname": "testhost", "interval_s": 1.0, "price": PRICE.as_dict()}
    daemon.store.set_meta("host", daemon.host)
    daemon.analyzer = build_analyzer(config, PRICE, None)
    t0 = time.time() - 30
    script = (sample(t0 + i, (gpu(0, 60.0 if i == 1 else 300.0), gpu(1, 55.0)),
                     proc(TRAIN, (0, 2 * GIB, 80.0), namespace="ml"),
                     proc(NOTEBOOK, (0, 6 * GIB, 0.0), command="jupyter lab", namespace="lab"))
              for i in itertools.count(1))
    daemon.collect = lambda: next(script)  # type: ignore[method-assign]
    for _ in range(ticks):
        daemon.tick_now()
    return daemon


def test_v1_now_carries_each_processs_energy_and_the_hosts_with_carbon(tmp_path):
    daemon = energy_daemon(tmp_path)
    try:
        now = Now.from_dict(daemon.now())
    finally:
        daemon.store.close()
    train = next(p for p in now.processes if p.pid == TRAIN[0])
    notebook = next(p for p in now.processes if p.pid == NOTEBOOK[0])
    # 5 charged seconds at 300 W on GPU 0 over its 60 W floor: 240 W to the trainer (the only
    # SM share), the 60 W floor 1:3 by memory; GPU 1 (55 W) is nobody's: the host's idle line
    assert train.energy is not None and notebook.energy is not None and now.energy is not None
    assert train.energy.watts == pytest.approx(240 + 15)
    assert train.energy.joules == pytest.approx(5 * 255)
    assert notebook.energy.joules == pytest.approx(5 * 45)
    assert train.energy.co2e_grams == pytest.approx(5 * 255 / JOULES_PER_KWH * 379.07)
    assert now.energy.host_idle is not None and now.energy.host_idle.joules == pytest.approx(
        5 * 55)
    assert now.energy.total is not None and now.energy.total.joules == pytest.approx(5 * 355)
    assert now.energy.g_per_kwh == pytest.approx(379.07) and "eGRID" in now.energy.grid_source
    assert dict(now.energy.by_namespace)["ml"].joules == pytest.approx(5 * 255)
    # a pod's job is its workload ("ns/pod"), as the cost ledger labels it
    assert dict(now.energy.by_job)["lab/p-0"].kwh == pytest.approx(5 * 45 / JOULES_PER_KWH)


def test_v1_now_uses_the_configured_intensity_and_says_when_carbon_is_unknown(tmp_path):
    daemon = energy_daemon(tmp_path / "own", {"grid_intensity_g_per_kwh": 100})
    try:
        own = Now.from_dict(daemon.now())
    finally:
        daemon.store.close()
    assert own.energy is not None and own.energy.g_per_kwh == 100.0
    assert own.energy.grid_source == CONFIG_SOURCE
    assert own.energy.total is not None and own.energy.total.co2e_grams == pytest.approx(
        5 * 355 / JOULES_PER_KWH * 100)
    daemon = energy_daemon(tmp_path / "unknown")
    daemon.analyzer.set_price(HostPrice(per_hour=4.0, gpu_count=2, lifecycle="on-demand",
                                        instance_type=None, provider=None, region=None,
                                        source="config", as_of=None))
    try:
        unknown = Now.from_dict(daemon.now())
    finally:
        daemon.store.close()
    assert unknown.energy is not None and unknown.energy.g_per_kwh is None
    assert "carbon unknown" in unknown.energy.grid_source
    assert unknown.energy.total is not None and unknown.energy.total.co2e_grams is None
    assert all(p.energy is None or p.energy.co2e_grams is None for p in unknown.processes)


def test_metrics_apportion_the_gpus_energy_to_workloads_and_the_idle_line_with_carbon(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.api.metrics import Metrics

    daemon = energy_daemon(tmp_path)
    try:
        text = Metrics(daemon).render().decode()
    finally:
        daemon.store.close()
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in text_string_to_metric_families(text) for s in family.samples}
    joules = {dict(labels).get("job_name", ""): (dict(labels).get("namespace"), value)
              for (name, labels), value in found.items() if name == "mlcost_energy_joules_total"}
    assert joules == {"ml/p-0": ("ml", pytest.approx(5 * 255)),
                      "lab/p-0": ("lab", pytest.approx(5 * 45)),
                      "__idle__": (None, pytest.approx(5 * 55))}
    gpu_joules = [v for (name, _), v in found.items() if name == "mlcost_gpu_energy_joules_total"]
    assert math.fsum(v for _, v in joules.values()) == pytest.approx(math.fsum(gpu_joules))
    grams = {dict(labels)["job_name"]: value for (name, labels), value in found.items()
             if name == "mlcost_energy_co2e_grams_total"}
    assert grams["ml/p-0"] == pytest.approx(5 * 255 / JOULES_PER_KWH * 379.07)
    [(labels, intensity)] = [(dict(labels), v) for (name, labels), v in found.items()
                             if name == "mlcost_grid_intensity_grams_per_kwh"]
    assert intensity == pytest.approx(379.07) and labels["source"] == "table"


def run_report(db: Path, *args: str) -> str:
    import subprocess
    import sys

    from tests.livedaemon import ROOT

    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A store the real tick path wrote: six ticks of the trainer and the notebook."""
    from daemon.store import facts

    folder = tmp_path_factory.mktemp("energy")
    daemon = energy_daemon(folder)
    hour = int(time.time() // 3600 * 3600) - 3600  # an hour of spend, as the ledger records it
    facts.write_spend(daemon.store, {hour: [3600.0, 8.0, 2.0, 2.0, 0.0]},
                      {(hour, TRAIN): [3600.0, 4.0], (hour, NOTEBOOK): [3600.0, 2.0]})
    daemon.store.close()
    return folder / "mlcost.db"


def test_the_report_gives_kwh_and_carbon_per_process_job_and_namespace(recorded):
    import json

    document = json.loads(run_report(recorded, "--since", "1h", "--json"))
    carbon = document["carbon"]
    # the window's floor is GPU 0's least reading (60 W at the first tick): as live
    assert carbon["joules"] == pytest.approx(5 * 355)
    assert carbon["host_idle"]["joules"] == pytest.approx(5 * 55)
    assert carbon["grid"]["g_per_kwh"] == pytest.approx(379.07)
    assert carbon["by_namespace"]["ml"]["kwh"] == pytest.approx(5 * 255 / JOULES_PER_KWH)
    procs = {p["pid"]: p for p in document["processes"]}
    assert procs[TRAIN[0]]["energy"]["co2e_grams"] == pytest.approx(
        5 * 255 / JOULES_PER_KWH * 379.07)
    assert procs[NOTEBOOK[0]]["energy"]["joules"] == pytest.approx(5 * 45)
    text = run_report(recorded, "--since", "1h")
    assert "energy used: 0.00049 kWh 0.19 g CO2e at 379.07 g CO2e/kWh (grid table, annual average: EPA eGRID2020" in text
    assert "by namespace: ml 0.00035 kWh 0.13 g CO2e, lab 0.000063 kWh 0.02 g CO2e" in text


def test_the_30_day_review_carries_energy_and_carbon_in_text_json_and_html(recorded, tmp_path):
    import json

    review = json.loads(run_report(recorded, "--since", "30d", "--json"))["review"]
    assert review["carbon"]["joules"] == pytest.approx(5 * 355)
    assert set(review["carbon"]["by_job"]) == {"ml/p-0", "lab/p-0"}
    text = run_report(recorded, "--since", "30d")
    assert "  energy used: 0.00049 kWh 0.19 g CO2e at 379.07 g CO2e/kWh" in text
    assert "by job: ml/p-0" in text
    page = tmp_path / "review.html"
    run_report(recorded, "--since", "30d", "--html", str(page))
    html = page.read_text().replace("<wbr>", "")  # (a job's name may wrap after its `/`)
    assert "energy used" in html and "job ml/p-0" in html and "379.07 g CO2e/kWh" in html
    # probe 126 F12: the page wrote 0.19 g as "0.000 kg" (0.71 g as "0.001 kg") where the
    # text gives "0.19 g", and an "energy -" row (its dollars, unpriced) beside "energy used"
    assert "0.00049 kWh 0.19 g CO2e" in html and " kg CO2e" not in html
    assert "<th>energy</th>" not in html


def test_the_snapshot_page_shows_energy_carbon_the_grid_and_the_top_users(recorded, tmp_path):
    """The HTML page of a recording (`snapshot --html`, profile.html) has the report's energy:
    the same totals as `report --json`, the grid and its source, processes and jobs by kWh."""
    from daemon.report_html import collect, render_store
    from tests import chromium

    data = collect(recorded)
    assert data.carbon is not None and data.carbon["joules"] == pytest.approx(5 * 355)
    energies = {p["pid"]: p["energy"]["joules"] for p in data.processes}
    assert energies == {TRAIN[0]: pytest.approx(5 * 255), NOTEBOOK[0]: pytest.approx(5 * 45)}
    page = tmp_path / "snapshot.html"
    page.write_text(render_store(recorded))
    loaded = chromium.load(page.as_uri(), "document.body.innerText")
    assert loaded.console_errors == []
    text = loaded.value
    assert ("used 0.00049 kWh 0.19 g CO2e at 379.07 g CO2e/kWh (grid table, annual average: "
            "EPA eGRID2020") in text
    assert "GPUs no process held: 0.000076 kWh" in text  # GPU 1: 55 W, nobody on it
    lines = text.splitlines()
    trainer = next(i for i, line in enumerate(lines) if "0.00035 kWh 0.13 g CO2e" in line)
    notebook = next(i for i, line in enumerate(lines) if "0.000063 kWh 0.02 g CO2e" in line)
    assert trainer < notebook  # the most kWh first
    assert "ml/p-0" in text and "lab/p-0" in text


def test_the_pages_energy_block_escapes_hostile_names_and_says_why_carbon_is_unknown():
    from daemon.report_html.data import ReportData
    from daemon.report_html.render import render

    hostile = '<script>window.pwned=1</script>"&'
    figure = {"joules": 3.6e6, "kwh": 1.0, "co2e_grams": None}
    data = ReportData(title="t", since=0.0, until=3600.0, host={}, price=None, snapshot=None,
                      processes=[{"pid": 7, "command": f"python {hostile}", "energy": figure}],
                      carbon={**figure, "grid": {"g_per_kwh": None, "source": (
                          "carbon unknown: the host's cloud region is not known")},
                          "host_idle": {"joules": 0.0}, "by_job": {hostile + "\x1b[2J": figure},
                          "covered_s": 3600.0, "span_s": 3600.0})
    page = render(data)
    assert "<script>" not in page and "\x1b" not in page
    assert "used <b>1.000 kWh</b> carbon unknown: the host&#x27;s cloud region" in page
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page


def test_the_snapshot_page_says_when_no_gpu_power_was_recorded():
    from daemon.report_html.data import ReportData
    from daemon.report_html.render import render

    page = render(ReportData(title="t", since=0.0, until=60.0, host={}, price=None,
                             snapshot=None))
    assert "Energy and carbon</h2><p class=\"muted\">no GPU power was recorded" in page


def test_check_says_which_grid_intensity_carbon_uses_or_how_to_set_one(tmp_path):
    from daemon.commands.check import OK, WARN, check_carbon

    on_prem = config_module.from_dict({"instance": {"provider": "on-prem",
                                                    "price_per_hour": 10.0}}, where="test")
    unknown = check_carbon(on_prem)
    assert unknown.status == WARN and "carbon unknown" in unknown.detail
    assert "[energy].grid_intensity_g_per_kwh" in (unknown.fix or "")
    own = check_carbon(config_module.from_dict({
        "instance": {"provider": "on-prem", "price_per_hour": 10.0},
        "energy": {"grid_intensity_g_per_kwh": 250}}, where="test"))
    assert own.status == OK and own.detail.startswith("250 g CO2e/kWh (config [energy]")


def test_hostile_readings_neither_break_the_sum_nor_reach_a_process():
    # a NaN SM share and a negative one count as no sample; a NaN or negative power is no reading
    tick = sample(1.0, (gpu(0, 200.0), gpu(1, float("nan")), gpu(2, -5.0)),
                  proc(TRAIN, (0, GIB, float("nan"))), proc(NOTEBOOK, (0, GIB, -3.0)))
    (split,) = split_power(tick, {"GPU-0": 50.0})
    assert split.by_process == {TRAIN: pytest.approx(100.0), NOTEBOOK: pytest.approx(100.0)}
    assert per_gpu_sum(split) == pytest.approx(200.0)


def test_a_replay_of_the_store_shows_the_energy_the_live_daemon_showed(tmp_path):
    from daemon import clock
    from daemon.replay import Replay

    daemon = energy_daemon(tmp_path)
    live = Now.from_dict(daemon.now())
    daemon.store.close()
    with Replay(daemon.db) as replay:
        replayed = Now.from_dict(replay.state_at(live.ts or 0.0))
    assert replayed.energy is not None and replayed.energy.g_per_kwh == pytest.approx(379.07)
    if clock.utc_day_start(live.ts or 0.0) > (live.ts or 0.0) - 10:
        pytest.skip("the recording crosses UTC midnight: a replay counts from the day's start")
    for mine, theirs in zip(live.processes, replayed.processes, strict=True):
        assert mine.energy is not None and theirs.energy is not None
        assert theirs.energy.joules == pytest.approx(mine.energy.joules)
    assert replayed.energy.host_idle is not None and live.energy is not None
    assert live.energy.host_idle is not None
    assert replayed.energy.host_idle.joules == pytest.approx(live.energy.host_idle.joules)


def test_the_store_keeps_the_intensity_the_daemon_ran_with_for_reports_and_replays(tmp_path):
    import json

    from daemon.replay import Replay

    config = config_module.from_dict({
        "daemon": {"db": str(tmp_path / "mlcost.db")},
        "instance": {"provider": "on-prem", "price_per_hour": 4.0},
        "energy": {"grid_intensity_g_per_kwh": 100}}, where="test")
    daemon = Daemon(config)
    daemon.store = Store(str(daemon.db))
    daemon.host = {"hostname": "testhost", "interval_s": 1.0}
    daemon.analyzer = daemon._make_analyzer()  # the runtime's own: prices, records the host
    t0 = time.time() - 30
    script = (sample(t0 + i, (gpu(0, 300.0),), proc(TRAIN, (0, GIB, 50.0)))
              for i in itertools.count(1))
    daemon.collect = lambda: next(script)  # type: ignore[method-assign]
    for _ in range(4):
        daemon.tick_now()
    daemon.store.close()
    # read without that config: the report and a replay use what the daemon recorded
    carbon = json.loads(run_report(daemon.db, "--since", "1h", "--json"))["carbon"]
    assert carbon["grid"]["g_per_kwh"] == 100.0 and carbon["grid"]["source"] == CONFIG_SOURCE
    assert carbon["co2e_grams"] == pytest.approx(3 * 300 / JOULES_PER_KWH * 100)
    with Replay(daemon.db) as replay:
        replayed = Now.from_dict(replay.state_at(time.time()))
    assert replayed.energy is not None and replayed.energy.g_per_kwh == 100.0


def test_a_window_past_raw_retention_gives_all_gpus_energy_from_the_rollups(tmp_path):
    """Raw ticks (the split by process) are kept 6 h by default; a 30-day review reads the
    rollups. Its energy is then all GPUs' mean power there times the time each was recorded,
    not only what the raw samples left covered."""
    import random

    from daemon.commands import report
    from tests.daemon.test_store import T0, drain, fill, make_sample

    path = tmp_path / "mlcost.db"
    with Store(path, raw_retention_s=1800) as store:
        last = fill(store, 2 * 3600, n_gpus=2, n_processes=1)
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0})
        drain(store)
    rng = random.Random(1)  # the same draws fill made: every tick's power, 1 s each
    joules = sum(g.power_watts or 0.0 for tick in range(1, 2 * 3600 + 1)
                 for g in make_sample(tick, T0, rng, n_gpus=2, n_processes=1).gpus)
    with Store.reader(path) as reader:
        document = report.build(reader, 3 * 3600, until=last + 1)
    assert document["window"]["source"] == "rollups"
    carbon = document["carbon"]
    assert carbon["covered_s"] < 3600  # the raw samples kept reach back 30 min
    whole = carbon["whole_window"]
    # the rollups hold the whole minutes, and the last, partial one not rolled up yet is read
    # from its raw ticks
    assert 2 * 3600 - 60 <= whole["covered_s"] <= 2 * 3600
    assert whole["joules"] / whole["covered_s"] == pytest.approx(joules / (2 * 3600), rel=1e-2)
    assert whole["joules"] > 2 * carbon["joules"]
    text = report.render_text(document)
    # (the 1,840 raw ticks kept span 1,839 s, each counted: the even spread of them the report
    # read before left some out, "30 min")
    assert carbon["covered_s"] == pytest.approx(1839.0)
    assert "(over 31 min of the window's 3.0 h: the raw samples reach no further)" in text, text
    assert "all GPUs over 2.0 h from the rollups' mean power:" in text, text
    from daemon.commands.report_energy import review_line

    review = review_line(document["review"])  # the 30-day review's energy line
    assert any("all GPUs over 2.0 h from the rollups:" in line for line in review), review
