"""The inference audit (daemon.analysis.inference_audit): for each inference workload its
runtime stack, signs of quantization, its batching and the advice with a saving, evidence and a
stated uncertainty. Read from real processes whose /proc/PID/maps show the libraries (workloads
that mmap a vLLM extension, libonnxruntime, bitsandbytes or libtorch), and carried to /v1/now
and the report with the savings priced at the process's burn."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from daemon.analysis.inference_audit import (
    BATCHED_SM_SHARE_PCT,
    audit_inference,
    recorded_audit,
    with_savings,
)
from daemon.analysis.kinds import Kind
from daemon.runtime.kinds import KindTracker
from daemon.sources.kindfacts import KindFacts, KindFactsReader
from daemon.wire import process_key
from tests.lifeline import spawn_options

NOW = 1_000_000.0
SERVER = Kind("online_inference", 0.9, ("listens on TCP port 8000",), serves=True)
BATCH = Kind("batch_inference", 0.7)


def names(audit) -> list[str]:
    return [a.name for a in audit.advice]


def test_plain_pytorch_server_underbatched_gets_batching_runtime_and_quantization_advice():
    readings = [4.0] * 16 + [9.0] * 3 + [10.0]  # the 90th percentile: 9 %
    audit = audit_inference(SERVER, KindFacts(libraries=("nccl", "torch")), (), readings)
    assert audit is not None
    assert audit.runtime == "PyTorch eager" and audit.runtime_evidence == ("maps torch",)
    assert audit.quantization == ()
    assert audit.sm_share_at_load == 9.0 and audit.sm_readings == 20
    assert names(audit) == ["dynamic_batching", "serving_runtime", "quantization"]
    batching = audit.advice[0]
    assert batching.saving_share == pytest.approx(1 - 9.0 / BATCHED_SM_SHARE_PCT)
    assert "upper bound" in batching.saving_method and "requests per kernel are not visible" \
        in batching.uncertainty
    assert any(e.startswith("SM share at load 9.0% (90th percentile of 20 readings")
               for e in batching.evidence)
    assert "vLLM or TGI" in audit.advice[1].text
    quant = audit.advice[2]
    assert quant.saving_share == 0.5 and quant.uncertainty.startswith("low:")
    document = audit.as_dict()
    assert document["batching"]["requests_per_kernel"] is None
    assert "not visible" in document["batching"]["requests_per_kernel_note"]


def test_vllm_with_bitsandbytes_is_told_to_raise_its_batch_limits_only():
    facts = KindFacts(libraries=("bitsandbytes", "torch", "triton", "vllm"))
    audit = audit_inference(SERVER, facts, {"vllm"}, [12.0] * 30)
    assert audit.runtime == "vLLM"
    assert audit.runtime_evidence == ("maps vllm", "vllm frames in its stacks")
    assert audit.quantization == ("bitsandbytes",)
    assert "loaded, not necessarily used" in audit.quantization_evidence[0]
    assert names(audit) == ["dynamic_batching"]
    assert "--max-num-seqs" in audit.advice[0].text


def test_torch_compile_fp8_and_awq_are_seen_and_a_well_batched_job_gets_no_batching_advice():
    facts = KindFacts(libraries=("awq", "fp8", "torch", "torch_compile"))
    audit = audit_inference(BATCH, facts, (), [80.0] * 12)
    assert audit.runtime == "torch.compile" and audit.quantization == ("AWQ", "FP8")
    # a batch job on plain PyTorch: the runtime advice names batch runtimes, not servers
    assert names(audit) == ["serving_runtime"]
    assert "TensorRT or ONNX Runtime" in audit.advice[0].text
    assert audit.advice[0].saving_share == 0.0  # well batched: nothing to free by batching


def test_too_few_readings_judge_no_batching_and_other_kinds_get_no_audit():
    audit = audit_inference(SERVER, KindFacts(libraries=("onnxruntime",)), (), [3.0] * 4)
    assert audit.runtime == "ONNX Runtime" and names(audit) == ["quantization"]
    assert audit.sm_readings == 4
    for kind in ("training", "notebook", "other"):
        assert audit_inference(Kind(kind, 0.9), KindFacts(libraries=("vllm",)), (), []) is None


def test_savings_in_dollars_come_from_the_burn_and_recorded_audits_are_data():
    audit = audit_inference(SERVER, KindFacts(libraries=("torch",)), (), [7.0] * 20).as_dict()
    priced = with_savings(audit, 2.0)
    share = priced["advice"][0]["saving_share"]
    assert priced["advice"][0]["saving_per_month"] == pytest.approx(share * 2.0 * 730, abs=0.01)
    assert with_savings(audit, None)["advice"][0]["saving_per_month"] is None
    assert with_savings(None, 2.0) is None
    hostile = {"runtime": "vLLM\x1b[2J" + "x" * 99, "runtime_evidence": ["ok", 3],
               "batching": {"sm_share_at_load": "9", "sm_readings": True},
               "advice": [{"name": "q", "text": "t\x07", "saving_share": float("inf")}, 5]}
    clean = recorded_audit(hostile)
    assert "\x1b" not in clean["runtime"] and len(clean["runtime"]) <= 40
    assert clean["runtime_evidence"] == ["ok"]
    assert clean["batching"]["sm_share_at_load"] is None and clean["batching"]["sm_readings"] == 0
    assert clean["advice"] == [{"name": "q", "text": clean["advice"][0]["text"],
                                "evidence": [], "saving_share": None, "saving_method": None,
                                "uncertainty": None}]
    assert "\x07" not in clean["advice"][0]["text"]
    assert recorded_audit("nope") is None


# A workload that maps the given files (as a process maps the libraries it loads), optionally
# listens on a TCP port, and says when it is ready. Written without the audit in mind: what it
# shows is what any process that loaded those libraries shows in /proc/PID/maps.
WORKLOAD = textwrap.dedent("""
    import mmap, os, socket, sys, time
    maps = []
    for path in sys.argv[2:]:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"\\0" * 4096)
        with open(path, "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ))
    server = None
    if sys.argv[1] == "listen":
        server = socket.create_server(("127.0.0.1", 0))
    print("ready", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def workloads(tmp_path):
    started: list[subprocess.Popen] = []

    def start(name: str, listen: bool, *files: str) -> tuple[int, float, str]:
        script = tmp_path / f"{name}.py"
        script.write_text(WORKLOAD)
        proc = subprocess.Popen([sys.executable, str(script), "listen" if listen else "no",
                                 *(str(tmp_path / f) for f in files)],
                                stdout=subprocess.PIPE, text=True, **spawn_options())
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc.pid, psutil.Process(proc.pid).create_time(), f"python {name}.py"

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_workloads_whose_maps_show_the_libraries_are_audited(workloads):
    vllm = workloads("api_server", True, "venv/site-packages/vllm/_C.abi3.so",
                     "venv/site-packages/torch/lib/libtorch_cuda.so")
    onnx = workloads("embed_batch", False, "venv/site-packages/onnxruntime/capi/"
                     "libonnxruntime.so.1.17.0",
                     "venv/site-packages/bitsandbytes/libbitsandbytes_cuda121.so")
    eager = workloads("serve", True, "venv/site-packages/torch/lib/libtorch_cuda.so",
                      "venv/site-packages/torch/lib/libtorch_cpu.so")
    tracker = KindTracker(KindFactsReader())
    procs = [(pid, start, command, {}) for pid, start, command in (vllm, onnx, eager)]
    now = time.time()
    for i in range(12):  # a round every ~2 s in the daemon; the SM share at load is 6 %
        tracker.refresh(procs, {}, now + i, {key[:2]: 6.0 for key in procs})
    documents = tracker.documents()
    by = {name: documents[process_key(pid, start)]
          for name, (pid, start, _) in {"vllm": vllm, "onnx": onnx, "eager": eager}.items()}
    assert by["vllm"]["kind"] == "online_inference"
    assert by["vllm"]["inference"]["runtime"] == "vLLM"
    assert [a["name"] for a in by["vllm"]["inference"]["advice"]] == [
        "dynamic_batching", "quantization"]
    assert by["onnx"]["kind"] == "batch_inference"
    assert by["onnx"]["inference"]["runtime"] == "ONNX Runtime"
    assert by["onnx"]["inference"]["quantization"] == ["bitsandbytes"]
    assert [a["name"] for a in by["onnx"]["inference"]["advice"]] == ["dynamic_batching"]
    assert by["eager"]["kind"] == "online_inference"
    assert by["eager"]["inference"]["runtime"] == "PyTorch eager"
    assert [a["name"] for a in by["eager"]["inference"]["advice"]] == [
        "dynamic_batching", "serving_runtime", "quantization"]
    assert by["eager"]["inference"]["batching"]["sm_share_at_load"] == 6.0
    assert by["eager"]["inference"]["batching"]["sm_readings"] == 12
    # The /v1/now entry of each: the audit with its savings priced at the process's burn.
    from daemon.analysis.cost_state import ProcessCost
    from daemon.api.document import CostView, now_document
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

    gpus = (GpuSample(0, "GPU-0", "NVIDIA L4", utilization=40.0,
                      memory_total_bytes=24 << 30),)
    pid, start, command = eager
    sample = Sample(ts=now, tick=1, gpus=gpus, processes=(ProcessSample(
        pid, start, 1, "alice", command, gpus=(GpuUse(0, 1 << 30, 6.0),)),))
    key = process_key(pid, start)
    cost = CostView(price={}, burn={}, ledger={},
                    processes={key: ProcessCost(1.0, 0.0, "serve.py", None)})
    document = now_document(host={}, sample=sample, previous=None, tick=1,
                            idle_utilization_pct=5.0, cost=cost, kinds=documents)
    [entry] = document["processes"]
    assert entry["kind_source"] == "observed"
    advice = entry["inference"]["advice"]
    assert advice[0]["saving_per_month"] == pytest.approx(
        advice[0]["saving_share"] * 730, abs=0.01)


def test_a_server_that_works_now_and_then_is_judged_on_its_readings_at_work():
    """One request every 20 s, a reading every ~2 s: most readings are 0. That is no load, and
    batching frees only the time it works: no '0% at load, batch it to save all its burn'."""
    sparse = [0.0] * 9 + [40.0]  # at work in 1 reading of 10, at 40% then
    audit = audit_inference(SERVER, KindFacts(libraries=("torch",)), (), sparse * 6)
    assert audit.sm_share_at_load == 40.0 and audit.sm_readings_at_work == 6
    assert "dynamic_batching" not in names(audit)  # 40% at work is not underbatched
    runtime = audit.advice[0]
    assert runtime.name == "serving_runtime"
    assert runtime.saving_share == pytest.approx(0.1 * (1 - 40.0 / BATCHED_SM_SHARE_PCT))
    assert "x 10% of the time at work" in runtime.saving_method
    assert any("the 6 of 60 readings that show it at work" in e for e in runtime.evidence)
    assert audit.as_dict()["batching"]["sm_readings_at_work"] == 6

    weak = audit_inference(SERVER, KindFacts(libraries=("torch",)), (), ([0.0] * 9 + [5.0]) * 6)
    assert names(weak)[0] == "dynamic_batching"  # at work, its SMs mostly idle: batch
    assert weak.advice[0].saving_share == pytest.approx(0.1 * (1 - 5.0 / BATCHED_SM_SHARE_PCT))

    never = audit_inference(SERVER, KindFacts(libraries=("torch",)), (), [0.0] * 30)
    assert never.sm_share_at_load is None and "dynamic_batching" not in names(never)
    assert never.advice[0].saving_share == 0.0
    assert "0 of its 30 SM share readings show it at work" in never.advice[0].saving_method
