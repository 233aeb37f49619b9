"""Peace with DCGM (daemon.sources.dcgm): with dcgm-exporter configured SM/tensor/DRAM activity
come from its profiling fields and GPM is never sampled; with nv-hostengine running GPM stays
off; a GPU whose GPM is refused as in use is left alone; `mlcostd check` says which source is
used. The exporter is a real aiohttp server serving dcgm-exporter's text format; the GPUs are
the simulated NVML (Hopper, GPM available)."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import livedaemon
import pynvml
import pytest
from dcgm_exporter import dcgm_exporter, exposition
from hostile_http import ENDLESS, TRICKLE, HostileServer, finishes_within
from livedaemon import MLCOSTD
from prometheus_client.parser import text_string_to_metric_families
from simhost import attach_code, attached, host_toml, poll, wait_until

from daemon.commands.check import OK, WARN, check_gpu_activity
from daemon.config import Config, ConfigError, NvmlConfig, load
from daemon.sim import scenario
from daemon.sources.dcgm import (
    DCGM_EXPORTER,
    GPM,
    HOSTENGINE,
    MAX_EXPOSITION_BYTES,
    DcgmActivity,
    ProfilingCounters,
    fetch_exposition,
    hostengine_running,
    parse_exposition,
)
from daemon.sources.nvml import HELD_BY_OTHER, NvmlSource

FAST = dict(call_deadline=0.5, retry_initial=0.2, retry_max=0.5)
HOPPER = "NVIDIA H100 80GB HBM3"
BUSY = [{"name": "busy", "gpus": [0], "code": attach_code(0, 2, "dev.kernel(0.2, sm=0.5)")}]


# -- the exposition and the host engine ----------------------------------------------------------


def test_the_three_profiling_fields_are_read_per_gpu_uuid_and_nothing_else():
    text = exposition({"GPU-a": {"DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_PROF_SM_ACTIVE": 0.62,
                                 "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.31,
                                 "DCGM_FI_PROF_DRAM_ACTIVE": 0.44},
                       "GPU-b": {"DCGM_FI_PROF_SM_ACTIVE": 0.05}},
                      pods={"GPU-a": ("ml", "train-0", "trainer")})
    # a MIG instance's series, and a value no ratio can have
    text += ('DCGM_FI_PROF_SM_ACTIVE{gpu="2",UUID="GPU-c",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"} '
             '0.9\nDCGM_FI_PROF_DRAM_ACTIVE{gpu="3",UUID="GPU-d"} 7.5\n')
    assert parse_exposition(text) == {
        "GPU-a": DcgmActivity(sm=0.62, tensor=0.31, dram=0.44),
        "GPU-b": DcgmActivity(sm=0.05)}


def test_text_that_is_not_an_exposition_is_refused():
    with pytest.raises(ValueError):
        parse_exposition("<html><body>502 Bad Gateway {</body></html>\n")


def test_a_trickling_exporter_is_cut_at_the_deadline_and_an_endless_one_at_the_cap():
    with HostileServer(TRICKLE) as server:
        done, outcome = finishes_within(10, fetch_exposition, server.url, 1.0)
    assert done, "still reading a trickling exporter after 10 s"
    assert isinstance(outcome, OSError) and "did not arrive in time" in str(outcome), outcome
    with HostileServer(ENDLESS) as server:
        done, outcome = finishes_within(30, fetch_exposition, server.url, 25.0)
    assert done
    assert isinstance(outcome, OSError), outcome
    assert f"larger than {MAX_EXPOSITION_BYTES} bytes" in str(outcome)


def fake_proc(root: Path, comms: dict[int, bytes]) -> str:
    for pid, comm in comms.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_bytes(comm)
    (root / "self").mkdir()
    return str(root)


def test_nv_hostengine_is_found_by_its_process_name_not_its_arguments(tmp_path):
    assert hostengine_running(fake_proc(tmp_path / "with", {1: b"systemd\n",
                                                           4242: b"nv-hostengine\n"}))
    assert not hostengine_running(fake_proc(tmp_path / "without", {
        1: b"systemd\n", 7: b"nv-hostengine-wr\n"}))
    counters = ProfilingCounters(proc_root=fake_proc(tmp_path / "engine", {9: b"nv-hostengine"}))
    assert counters.source_for("GPU-x") == (HOSTENGINE, None)
    assert ProfilingCounters(proc_root=str(tmp_path / "without")).source_for("GPU-x") == (GPM,
                                                                                          None)


# -- the NVML source on the simulated Hopper --------------------------------------------------


@pytest.fixture
def gpm_calls(monkeypatch):
    """How often the source asked NVML for a GPM sample (a spy: the call still runs)."""
    calls = []
    real = pynvml.nvmlGpmSampleGet

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(pynvml, "nvmlGpmSampleGet", spy)
    return calls


@pytest.fixture
def hopper(sim_host):
    """Start a simulated Hopper host (GPM available) whose GPU 0 runs a kernel on half its SMs
    (this process's, closed at the end: no workload process to wait for)."""
    devices = []

    def start(gpus: int = 1, faults: str = "") -> scenario.Running:
        running = sim_host(host_toml(gpus=gpus, model=HOPPER, gpm=True, faults=faults),
                           init=False)
        devices.append(attached(running, 0, 2, sm=0.5))
        return running

    yield start
    for device in devices:
        device.close()


@pytest.fixture
def source():
    started = []

    def make(config: NvmlConfig, interval: float = 0.5,
             profiling: ProfilingCounters | None = None) -> NvmlSource:
        src = NvmlSource(config, interval)
        if profiling is not None:
            src.profiling = profiling
        src.start()
        started.append(src)
        return src

    yield make
    for src in started:
        src.stop()


def first_gpu(src: NvmlSource, ready=lambda gpu: True):
    return wait_until(lambda: next((g for g in src.latest()[1] if ready(g)), None), timeout=10)


def test_with_dcgm_exporter_configured_activity_is_dcgms_and_gpm_is_never_sampled(
        hopper, source, gpm_calls):
    hopper()
    with dcgm_exporter("") as exporter:
        src = source(NvmlConfig(**FAST, dcgm_exporter_url=exporter.url))
        uuid = first_gpu(src).uuid
        exporter.body = exposition({uuid: {"DCGM_FI_PROF_SM_ACTIVE": 0.25,
                                           "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.125,
                                           "DCGM_FI_PROF_DRAM_ACTIVE": 0.5}})
        gpu = first_gpu(src, lambda g: g.sm_activity is not None)
        assert gpu.sm_activity == pytest.approx(25.0)  # DCGM's 0.25, not GPM's ~50 %
        assert src.activity_sources() == {0: (uuid, DCGM_EXPORTER, DcgmActivity(0.25, 0.125,
                                                                                 0.5))}
        assert exporter.scrapes >= 1
    assert gpm_calls == []  # the counters are DCGM's: never sampled


def test_an_exporter_that_does_not_answer_still_keeps_gpm_off(hopper, source, gpm_calls):
    hopper()
    with dcgm_exporter("") as exporter:
        url = exporter.url
    src = source(NvmlConfig(**FAST, dcgm_exporter_url=url))  # nothing listens there now
    wait_until(lambda: src.profiling.status.startswith(url), timeout=10)
    first = src.read_at(0) if src.read_at(0) is not None else wait_until(
        lambda: src.read_at(0), timeout=10)
    wait_until(lambda: (src.read_at(0) or 0) - first >= 1.0, timeout=10)  # readings go on
    assert src.latest()[1][0].sm_activity is None
    assert src.activity_sources()[0][1] == DCGM_EXPORTER
    assert gpm_calls == []


def test_with_nv_hostengine_running_gpm_stays_off(hopper, source, gpm_calls, tmp_path):
    hopper()
    engine = ProfilingCounters(proc_root=fake_proc(tmp_path / "proc", {77: b"nv-hostengine\n"}))
    src = source(NvmlConfig(**FAST), profiling=engine)
    wait_until(lambda: src.activity_sources().get(0, ("", ""))[1] == HOSTENGINE, timeout=10)
    first = wait_until(lambda: src.read_at(0), timeout=10)
    wait_until(lambda: (src.read_at(0) or 0) - first >= 1.0, timeout=10)
    assert src.latest()[1][0].sm_activity is None
    assert gpm_calls == []


def test_a_gpu_whose_gpm_is_in_use_by_another_reader_is_left_alone(hopper, source,
                                                                    gpm_calls):
    hopper(gpus=2, faults="""
[[faults]]
kind = "in_use"
gpu = 0
calls = ["nvmlGpmSampleGet"]
""")
    src = source(NvmlConfig(**FAST))
    wait_until(lambda: src.activity_sources().get(0, ("", ""))[1] == HELD_BY_OTHER, timeout=10)
    asked = len(gpm_calls)
    first = src.read_at(0)
    wait_until(lambda: (src.read_at(0) or 0) - (first or 0) >= 1.0, timeout=10)
    assert src.latest()[1][0].sm_activity is None
    on_gpu = [[c for c in gpm_calls[asked:] if c[0] is src._devices[i].handle] for i in (0, 1)]
    assert on_gpu[0] == []  # asked once, refused, never again
    assert on_gpu[1]  # the other GPU's samples go on
    assert src.activity_sources()[1][1] == GPM  # the other GPU keeps its GPM


# -- mlcostd check -------------------------------------------------------------------------------


def test_check_says_dcgm_exporter_when_it_answers_and_the_fix_when_it_does_not():
    with dcgm_exporter(exposition({"GPU-a": {"DCGM_FI_PROF_SM_ACTIVE": 0.5},
                                   "GPU-b": {"DCGM_FI_PROF_SM_ACTIVE": 0.1}})) as exporter:
        config = Config(nvml=NvmlConfig(dcgm_exporter_url=exporter.url))
        found = check_gpu_activity(config)
        assert found.status == OK and "dcgm-exporter" in found.detail
        assert "2 GPU(s)" in found.detail and "GPM left off" in found.detail
        exporter.body = exposition({"GPU-a": {"DCGM_FI_DEV_GPU_UTIL": 40}})
        found = check_gpu_activity(config)
        assert found.status == WARN and "no DCGM_FI_PROF_* field" in found.detail
        assert "DCGM_FI_PROF_SM_ACTIVE" in found.fix


def test_check_says_nv_hostengine_holds_the_counters_and_how_to_read_them(tmp_path):
    engine = fake_proc(tmp_path / "proc", {77: b"nv-hostengine\n"})
    found = check_gpu_activity(Config(), proc_root=engine)
    assert found.status == WARN and "nv-hostengine" in found.detail
    assert "[nvml].dcgm_exporter_url" in found.fix
    assert check_gpu_activity(Config(), proc_root=str(tmp_path)).detail.startswith("NVML's GPM")


def test_mlcostd_check_prints_the_source(tmp_path):
    with dcgm_exporter(exposition({"GPU-a": {"DCGM_FI_PROF_SM_ACTIVE": 0.5}})) as exporter:
        config = tmp_path / "mlcost.toml"
        config.write_text(f'[nvml]\ndcgm_exporter_url = "{exporter.url}"\n')
        done = subprocess.run([*MLCOSTD, "check", "--json", "--config", str(config),
                               "--db", str(tmp_path / "mlcost.db")],
                              capture_output=True, text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["SM activity source"]["status"] == OK
    assert exporter.url in checks["SM activity source"]["detail"]


def test_mlcostd_check_does_not_call_gpm_the_source_where_nvml_did_not_start(tmp_path):
    """Probe 141 L10: `[FAIL] NVML … not found`, then `[ok] SM activity source: NVML's GPM`.
    Run where NVML starts or not: the two lines agree either way (this machine has none, the
    CI runner neither; a GPU host reads both ok)."""
    done = subprocess.run([*MLCOSTD, "check", "--json", "--db", str(tmp_path / "mlcost.db")],
                          capture_output=True, text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    source = checks["SM activity source"]
    if checks["NVML"]["status"] == "fail":
        assert source["status"] == WARN and "NVML did not start" in source["detail"]
    else:
        assert source["status"] == OK and source["detail"].startswith("NVML's GPM")
    assert check_gpu_activity(Config(), proc_root=str(tmp_path), nvml_started=False).status == WARN


def test_a_dcgm_exporter_url_that_is_not_http_is_refused_with_the_fix(tmp_path):
    config = tmp_path / "mlcost.toml"
    config.write_text('[nvml]\ndcgm_exporter_url = "localhost:9400"\n')
    with pytest.raises(ConfigError, match=r"dcgm_exporter_url = 'localhost:9400'.*http"):
        load(config)


# -- a real daemon -------------------------------------------------------------------------------


def test_a_daemon_reading_dcgm_exporter_exposes_its_activity_and_the_source(tmp_path):
    host = tmp_path / "hopper.toml"
    host.write_text(host_toml(gpus=1, model=HOPPER, gpm=True, workloads=BUSY))
    uuid = scenario.load(host).gpu_uuid(0)
    body = exposition({uuid: {"DCGM_FI_PROF_SM_ACTIVE": 0.375,
                              "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.25,
                              "DCGM_FI_PROF_DRAM_ACTIVE": 0.5}})
    with dcgm_exporter(body) as exporter:
        daemon = livedaemon.start(tmp_path / "mlcostd", str(host), interval=0.5,
                                  config={"nvml": {"dcgm_exporter_url": exporter.url}},
                                  args=["--metrics-listen", "127.0.0.1:0"])
        try:
            port = int(poll(lambda: re.search(r"metrics on http://[^:]+:(\d+)/metrics",
                                              daemon.log()), 30, "the metrics port",
                            explain=daemon.log_tail).group(1))

            def scraped() -> dict[str, float] | None:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=10) as response:
                    text = response.read().decode()
                found = {s.name + ":" + s.labels.get("source", ""): s.value
                         for f in text_string_to_metric_families(text) for s in f.samples
                         if s.labels.get("UUID") == uuid}
                return found if "mlcost_gpu_sm_activity_ratio:" in found else None

            found = poll(scraped, 30, "DCGM's SM activity in /metrics", explain=daemon.log_tail)
        finally:
            assert daemon.stop() == 0
    assert found["mlcost_gpu_sm_activity_ratio:"] == pytest.approx(0.375)
    assert found["mlcost_gpu_tensor_activity_ratio:"] == pytest.approx(0.25)
    assert found["mlcost_gpu_dram_activity_ratio:"] == pytest.approx(0.5)
    assert found["mlcost_gpu_activity_source_info:dcgm-exporter"] == 1.0
