"""The inference audit: for each inference workload (batch or online, daemon.analysis.kinds),
what serves it, whether its weights are quantized, how well it batches, and the advice that
follows, each with its evidence, a saving and how sure we are.

Pure: it reads what the kind was classified from (the libraries mapped into the process:
daemon.sources.kindfacts; the frame markers seen in its threads: kinds.frame_markers) and the
process's SM share over the last minutes (NVML per-process utilization, kept by
daemon.runtime.kinds). Nothing here is text of the process: runtimes, quantization schemes and
evidence are our own words and numbers.

- Runtime: the first of RUNTIMES found (a serving runtime before the libraries it loads, so vLLM
  with libtorch is vLLM), else torch.compile (inductor kernels mapped, or dynamo/inductor frames),
  else plain PyTorch eager (libtorch only), else JAX/XLA, else unknown.
- Quantization: bitsandbytes, AWQ, GPTQ libraries mapped or their frames; FP8 kernels' libraries
  (Transformer Engine) mapped. A library loaded is not proof that it runs: said in the evidence.
- Batching: the SM share at load (the 90th percentile of the readings that show it at work, SM
  share above 0: a server taking a request every 20 s reads 0 most of the time, and that is no
  load) and on average. Requests per kernel are not visible from outside the process: said so.
- Advice: dynamic batching where the SMs stay mostly idle at load; a serving runtime with
  continuous batching where plain PyTorch serves; quantization where no sign of it is found. The
  saving is a share of the process's burn (the /v1/now document and the report turn it into
  dollars with the burn they show: `with_savings`), an upper bound with its method.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.analysis.kinds import INFERENCE_KINDS, ONLINE_INFERENCE, Kind
from daemon.sources.kindfacts import KindFacts
from daemon.sources.safe_text import one_line
from pricing.offer import HOURS_PER_MONTH

# What a well-batched server keeps its GPU at under load: the underbatched rule's "well used"
# line (rules/thresholds.py WELL_USED_UTILIZATION_PCT, SageMaker Debugger's p95 70%).
BATCHED_SM_SHARE_PCT = 70.0
# Below this SM share at load, its kernels leave most SMs idle: the underbatched rule's line
# (rules/thresholds.py UNDERBATCH_SM_ACTIVITY_PCT).
UNDERBATCHED_SM_SHARE_PCT = 30.0
MIN_READINGS = 10  # SM share readings (one per discovery round, ~2 s) before batching is judged
MIN_AT_WORK = 3  # of them showing it at work (SM share above 0)
AT_LOAD_PERCENTILE = 0.9
# 8-bit weights take half the memory of 16-bit ones: two replicas where one was (the saving's
# assumption, stated in its method).
QUANTIZED_MEMORY_SHARE = 0.5

# (runtime, what shows it: a library marker or a frame marker), in the order they win.
RUNTIMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vLLM", ("vllm", "frame:vllm")),
    ("SGLang", ("sglang",)),
    ("TGI", ("tgi", "frame:tgi")),
    ("Triton Inference Server", ("triton_server",)),
    ("TensorRT", ("tensorrt", "frame:tensorrt")),
    ("ONNX Runtime", ("onnxruntime", "frame:onnxruntime")),
    ("torch.compile", ("torch_compile", "frame:torch_compile")),
    ("PyTorch eager", ("torch",)),
    ("JAX/XLA", ("jax",)),
)
# Runtimes that batch requests themselves (continuous or dynamic batching).
BATCHING_RUNTIMES = frozenset({"vLLM", "SGLang", "TGI", "Triton Inference Server"})
PLAIN_PYTORCH = frozenset({"PyTorch eager", "torch.compile"})
# (scheme, markers that show it, what the sign means)
QUANTIZATION: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("bitsandbytes", ("bitsandbytes", "frame:bitsandbytes"),
     "8-bit or 4-bit weights (LLM.int8 / NF4)"),
    ("AWQ", ("awq", "frame:awq"), "4-bit activation-aware weights"),
    ("GPTQ", ("gptq", "frame:gptq"), "4-bit GPTQ weights"),
    ("FP8", ("fp8",), "FP8 kernels' library loaded (Transformer Engine)"),
)


@dataclass(frozen=True)
class Advice:
    """One piece of advice: what to do, why (evidence), its saving as a share of the process's
    burn (an upper bound, with its method) and how sure we are."""

    name: str  # dynamic_batching, serving_runtime, quantization
    text: str
    evidence: tuple[str, ...]
    saving_share: float  # of the process's burn, 0..1
    saving_method: str
    uncertainty: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "text": self.text, "evidence": list(self.evidence),
                "saving_share": round(self.saving_share, 3), "saving_method": self.saving_method,
                "uncertainty": self.uncertainty}


@dataclass(frozen=True)
class InferenceAudit:
    runtime: str
    runtime_evidence: tuple[str, ...]
    quantization: tuple[str, ...]
    quantization_evidence: tuple[str, ...]
    sm_share_at_load: float | None  # percent, the 90th percentile of its readings at work
    sm_share_mean: float | None
    sm_readings: int
    sm_readings_at_work: int = 0  # of them, those with an SM share above 0
    advice: tuple[Advice, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime, "runtime_evidence": list(self.runtime_evidence),
            "quantization": list(self.quantization),
            "quantization_evidence": list(self.quantization_evidence),
            "batching": {
                "sm_share_at_load": _round(self.sm_share_at_load),
                "sm_share_mean": _round(self.sm_share_mean),
                "sm_readings": self.sm_readings,
                "sm_readings_at_work": self.sm_readings_at_work,
                "requests_per_kernel": None,
                "requests_per_kernel_note": (
                    "not visible from outside the process: NVML counts kernels' SM time, not "
                    "requests; a request counter ([[cost.unit_costs]], unit = requests) gives "
                    "the request rate"),
            },
            "advice": [a.as_dict() for a in self.advice],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _signs(facts: KindFacts | None, markers: Iterable[str]) -> set[str]:
    """Library markers as they are, frame markers as 'frame:NAME'."""
    return set(facts.libraries if facts else ()) | {f"frame:{m}" for m in markers}


def _said(sign: str) -> str:
    return (f"{sign[6:]} frames in its stacks" if sign.startswith("frame:")
            else f"maps {sign}")


def audit_inference(kind: Kind, facts: KindFacts | None, markers: Iterable[str] = (),
                    sm_shares: Iterable[float] = ()) -> InferenceAudit | None:
    """The audit of one process, None unless its kind is batch or online inference.
    `markers`: the frame markers seen recently; `sm_shares`: its SM share readings (percent,
    summed over its GPUs), oldest first."""
    if kind.kind not in INFERENCE_KINDS:
        return None
    signs = _signs(facts, markers)
    runtime = "unknown"
    runtime_evidence: tuple[str, ...] = ("no serving runtime or framework library mapped",)
    for name, shows in RUNTIMES:
        found = [s for s in shows if s in signs]
        if found:
            runtime, runtime_evidence = name, tuple(_said(s) for s in found)
            break
    quantized, quant_evidence = [], []
    for scheme, shows, meaning in QUANTIZATION:
        found = [s for s in shows if s in signs]
        if found:
            quantized.append(scheme)
            quant_evidence.append(f"{scheme}: {', '.join(_said(s) for s in found)} "
                                  f"({meaning}; loaded, not necessarily used)")
    readings = [float(s) for s in sm_shares if isinstance(s, int | float) and s >= 0]
    at_work = [s for s in readings if s > 0]
    at_load = _percentile(at_work, AT_LOAD_PERCENTILE) if at_work else None
    mean = sum(readings) / len(readings) if readings else None
    audit = InferenceAudit(runtime, runtime_evidence, tuple(quantized), tuple(quant_evidence),
                           at_load, mean, len(readings), len(at_work))
    return replace(audit, advice=tuple(_advise(kind, audit)))


def _advise(kind: Kind, audit: InferenceAudit) -> list[Advice]:
    advice: list[Advice] = []
    at_load = audit.sm_share_at_load
    readings, working = audit.sm_readings, audit.sm_readings_at_work
    judged = readings >= MIN_READINGS and working >= MIN_AT_WORK and at_load is not None
    # Batching frees GPU time only while it works: a server at work in 5% of the readings has
    # the rest of its burn idle, whatever its batches (the idle and over-provisioning rules').
    at_work_share = working / readings if readings else 0.0
    batching_share = (at_work_share * max(0.0, 1 - at_load / BATCHED_SM_SHARE_PCT)
                      if judged and at_load is not None else 0.0)
    counted = (f"{readings} readings" if working == readings else
               f"the {working} of {readings} readings that show it at work, "
               f"{at_work_share:.0%} of them")
    load = (f"SM share at load {at_load:.1f}% (90th percentile of {counted}; mean "
            f"{audit.sm_share_mean:.1f}%)" if judged and at_load is not None
            and audit.sm_share_mean is not None else "")
    method = (f"upper bound: the same requests in batches keep its GPU {BATCHED_SM_SHARE_PCT:g}% "
              f"busy instead of {at_load or 0:.1f}%, so (1 - {at_load or 0:.1f}/"
              f"{BATCHED_SM_SHARE_PCT:g})"
              + (f" x {at_work_share:.0%} of the time at work" if working < readings else "")
              + f" = {batching_share:.0%} of its burn is freed, once the "
              "freed GPU time goes to other work (fewer replicas, a shared or smaller GPU)")
    not_judged = (f"not estimated: fewer than {MIN_READINGS} SM share readings yet"
                  if readings < MIN_READINGS else
                  f"not estimated: {working} of its {readings} SM share readings show it at "
                  f"work (fewer than {MIN_AT_WORK})")
    underbatched = judged and at_load is not None and at_load < UNDERBATCHED_SM_SHARE_PCT
    if underbatched and audit.runtime in BATCHING_RUNTIMES:
        advice.append(Advice(
            "dynamic_batching",
            f"{audit.runtime} batches, but its SMs stay mostly idle at load: raise its batch "
            "limits (vLLM --max-num-seqs / --max-num-batched-tokens, TGI "
            "--max-batch-prefill-tokens, Triton dynamic_batching max_queue_delay) or send it "
            "more concurrent requests",
            (load, *audit.runtime_evidence), batching_share, method,
            "medium: the SM share is measured; how far the batch can grow depends on the "
            "latency budget and memory for the KV cache; requests per kernel are not visible"))
    elif underbatched:
        advice.append(Advice(
            "dynamic_batching",
            "batch requests dynamically: gather the requests that arrive within a few "
            "milliseconds into one forward pass"
            + (" (offline: raise the batch size)" if kind.kind != ONLINE_INFERENCE else ""),
            (load, *audit.runtime_evidence), batching_share, method,
            "medium: the SM share is measured; the gain depends on the model, the batch size "
            "its memory allows and the latency budget; requests per kernel are not visible"))
    if audit.runtime in PLAIN_PYTORCH or audit.runtime == "unknown":
        serving = kind.kind == ONLINE_INFERENCE
        advice.append(Advice(
            "serving_runtime",
            ("serve it with a runtime that batches continuously (vLLM or TGI for LLMs, Triton "
             "Inference Server or TorchServe with batching for other models)" if serving else
             "run it through an inference runtime: TensorRT or ONNX Runtime for fixed models, "
             "vLLM's offline LLM engine for generation")
            + f" instead of {audit.runtime if audit.runtime != 'unknown' else 'its own loop'}",
            (*audit.runtime_evidence, *( [load] if load else [])),
            batching_share, method + "; not additive with dynamic batching (the runtime is "
            "how it batches)" if judged else not_judged,
            "low: runtimes differ by model; the saving is the batching bound, and a port "
            "(model support, compile time, output parity) is work to weigh against it"))
    if not audit.quantization:
        advice.append(Advice(
            "quantization",
            "quantize the weights: 8-bit (bitsandbytes LLM.int8, FP8 on Hopper or newer) halves "
            "their memory, 4-bit (AWQ, GPTQ) quarters it: more replicas per GPU or a smaller GPU",
            ("no bitsandbytes, AWQ, GPTQ or FP8 library mapped or in its frames",
             *audit.runtime_evidence),
            QUANTIZED_MEMORY_SHARE,
            "upper bound: with 8-bit weights two replicas fit where one did, so half its burn "
            "serves the same load, if its memory is mostly 16-bit weights (not KV cache or "
            "activations) and memory, not compute, limits the replicas per GPU",
            "low: a scheme may be built into the runtime where no library shows it (TensorRT "
            "INT8, vLLM's own kernels); accuracy must be checked on its own data"))
    return advice


def with_savings(audit: Mapping[str, Any] | None,
                 burn_per_hour: float | None) -> dict[str, Any] | None:
    """The audit document with each advice's saving in dollars a month (its share of the
    process's burn x 730 h); None stays None."""
    if not isinstance(audit, Mapping):
        return None
    advice = []
    for item in audit.get("advice") or []:
        share = item.get("saving_share") if isinstance(item, Mapping) else None
        monthly = (round(share * burn_per_hour * HOURS_PER_MONTH, 2)
                   if isinstance(share, int | float) and isinstance(burn_per_hour, int | float)
                   else None)
        advice.append(dict(item, saving_per_month=monthly))
    return dict(audit, advice=advice)


def recorded_audit(value: Any) -> dict[str, Any] | None:
    """An audit as a store or snapshot holds it (inside the kind document), read as data: the
    known fields only, each of its type, one line and bounded."""
    if not isinstance(value, dict):
        return None

    def text(v: Any, limit: int = 300) -> str | None:
        return one_line(v)[:limit] if isinstance(v, str) else None

    def texts(v: Any) -> list[str]:
        return [one_line(t)[:300] for t in v[:16] if isinstance(t, str)] \
            if isinstance(v, list) else []

    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) \
            and math.isfinite(v) else None

    found = value.get("batching")
    batching: dict[str, Any] = found if isinstance(found, dict) else {}
    readings = batching.get("sm_readings")
    working = batching.get("sm_readings_at_work")
    return {
        "runtime": text(value.get("runtime"), 40),
        "runtime_evidence": texts(value.get("runtime_evidence")),
        "quantization": texts(value.get("quantization")),
        "quantization_evidence": texts(value.get("quantization_evidence")),
        "batching": {"sm_share_at_load": number(batching.get("sm_share_at_load")),
                     "sm_share_mean": number(batching.get("sm_share_mean")),
                     "sm_readings": readings if isinstance(readings, int)
                     and not isinstance(readings, bool) else 0,
                     "sm_readings_at_work": working if isinstance(working, int)
                     and not isinstance(working, bool) else None,
                     "requests_per_kernel": None,
                     "requests_per_kernel_note": text(batching.get("requests_per_kernel_note"))},
        "advice": [{"name": text(a.get("name"), 40), "text": text(a.get("text"), 400),
                    "evidence": texts(a.get("evidence")),
                    "saving_share": number(a.get("saving_share")),
                    "saving_method": text(a.get("saving_method"), 500),
                    "uncertainty": text(a.get("uncertainty"), 400)}
                   for a in (value.get("advice") or [])[:8] if isinstance(a, dict)]
        if isinstance(value.get("advice"), list) else [],
    }
