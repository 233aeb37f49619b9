"""The phase classifier on py-spy dumps recorded from real torch/HF/Lightning programs, one live
starved-DataLoader run, table-driven negatives, and phase_balance arithmetic."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_source_lines import searchable_folder

from daemon.analysis import host_signals, phases, source_lines, stack_rules
from daemon.analysis.host_signals import HostSignals, cpu_demand
from daemon.analysis.phase_balance import SampleTally, StackSample, phase_balance, sample_split
from daemon.analysis.phases import Classification, classify, waits_on_data_queue
from daemon.analysis.proc_phases import classify_from_proc
from daemon.analysis.source_lines import credentials, read_source_line, source_reader
from daemon.sources import proc_state
from daemon.sources.stacks import (
    DumpResult,
    Frame,
    StackSampler,
    ThreadStack,
    find_py_spy,
    parse_dump,
    stack_hash,
    worker_pids,
)
from daemon.wire import PHASES

# A folder every user may search: files the classifier reads with read_source_line's default
# reader (ANYONE) must be reachable by anyone.
open_folder = pytest.fixture(searchable_folder, name="open_folder")

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "pyspy"
WORKLOADS = HERE / "workloads"
SITE = "/usr/lib/python3/dist-packages"
STDLIB = "/usr/lib/python3.11"


def load(name: str) -> list[ThreadStack]:
    return parse_dump((FIXTURES / f"{name}.json").read_text())


def local_source(frame: Frame) -> str | None:
    """Fixtures were recorded in another checkout: read workload lines from this one."""
    marker = "tests/daemon/workloads/"
    if marker in frame.filename:
        frame = Frame(frame.name, str(WORKLOADS / frame.filename.split(marker, 1)[1]), frame.line)
    return read_source_line(frame)


def on(name: str, **kw) -> Classification:
    kw.setdefault("gpu_busy", False)
    kw.setdefault("source_line", local_source)
    return classify(load(name), **kw)


# fixture -> (phases accepted, file of the responsible user frame, reason fragment)
RECORDED = {
    "loader_inline": ({"host_preprocess", "data_wait"}, "loader_inline.py", "DataLoader"),
    "loader_starved": ({"data_wait"}, "loader_starved.py", "_try_get_data"),
    "loader_starved.worker": ({"data_wait"}, "loader_starved.py", "read"),
    "checkpoint_save": ({"checkpoint"}, "checkpoint_save.py", "torch.save"),
    "eval_no_grad": ({"eval"}, "eval_loop.py", "no_grad"),
    "opaque_read": ({"data_wait"}, "opaque_read.py", "os.read"),
    "item_loop": ({"sync"}, "item_loop.py", ".item()"),
    "hf_trainer_eval": ({"eval"}, "hf_trainer.py", "prediction"),
    "hf_trainer_checkpoint": ({"checkpoint"}, "hf_trainer.py", "save"),
    "lightning_data_wait": ({"data_wait"}, "lightning_fit.py", "DataLoader"),
    "lightning_eval": ({"eval"}, "lightning_fit.py", "Lightning evaluation loop"),
    "lightning_checkpoint": ({"checkpoint"}, "lightning_fit.py", "torch.save"),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_stack_is_classified(name):
    accepted, user_file, reason = RECORDED[name]
    result = on(name)
    assert result.phase in accepted, result
    assert reason in result.reason
    assert result.frame is not None and result.frame.filename.endswith(user_file)
    assert stack_rules.is_user_code(result.frame)


def test_starved_worker_dump_shows_the_reading_line():
    result = on("loader_starved.worker")
    assert result.frame.name == "ShardStream.__getitem__"
    assert ".read(" in local_source(result.frame)


def test_a_worker_loading_samples_is_said_to_be_a_worker_not_the_main_process():
    # Seen on an H200 (scripts/gpu-check): the workers of a num_workers=2 DataLoader whose
    # Dataset sleeps were "loading samples in the main process (num_workers=0)".
    worker = on("loader_starved.worker", source_line=None)  # its read not seen: CPU work
    assert worker.phase == "host_preprocess"
    assert "DataLoader worker process" in worker.reason and "num_workers=0" not in worker.reason
    inline = on("loader_inline")
    assert inline.phase == "host_preprocess" and "main process (num_workers=0)" in inline.reason


def test_main_process_waiting_on_workers_asks_for_worker_dumps():
    assert waits_on_data_queue(load("loader_starved"))
    assert waits_on_data_queue(load("lightning_data_wait"))
    assert not waits_on_data_queue(load("loader_inline"))
    assert not waits_on_data_queue(load("checkpoint_save"))


def test_unfamiliar_blocking_read_without_sources_uses_process_signals():
    assert on("opaque_read", source_line=None, proc_state="D").phase == "data_wait"
    assert on("opaque_read", source_line=None, iowait_growing=True).phase == "data_wait"
    # blocked (py-spy active=false) with nothing else known: the GPU is held, nothing runs
    assert on("opaque_read", source_line=None).phase == "idle"


def test_repeated_leaf_is_sync_without_sources():
    assert on("item_loop", source_line=None).phase == "unknown"
    assert on("item_loop", source_line=None, repeated_leaf=True).phase == "sync"


@pytest.mark.parametrize("name", sorted(set(RECORDED) - {"eval_no_grad", "hf_trainer_eval", "lightning_eval"}))
def test_gpu_busy_is_compute(name):
    assert on(name, gpu_busy=True).phase == "compute"


def test_gpu_busy_in_eval_is_still_eval():
    assert on("hf_trainer_eval", gpu_busy=True).phase == "eval"


# -- synthetic stacks: library signatures and negatives --------------------------------------

USER = "/home/me/train.py"


def stack(*frames: tuple[str, str, int], active: bool = False) -> list[ThreadStack]:
    """frames innermost first, as py-spy gives them."""
    return [ThreadStack(1, "MainThread", active, tuple(Frame(n, f, ln) for f, n, ln in frames))]


def no_source(_frame: Frame) -> None:
    return None


CASES = [
    # (what, frames, expected phase)
    ("c10d all_reduce", [(f"{SITE}/torch/distributed/c10d_logger.py", "_exception_logger.<locals>.wrapper", 81),
                         (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce", 3200),
                         (USER, "step", 10)], "comm"),
    ("torch.cuda.synchronize", [(f"{SITE}/torch/cuda/__init__.py", "synchronize", 1230),
                                (USER, "step", 11)], "sync"),
    ("vLLM no traffic", [(f"{STDLIB}/queue.py", "Queue.get", 180),
                         (f"{SITE}/vllm/v1/engine/core.py", "EngineCoreProc._process_input_queue", 700),
                         (f"{SITE}/vllm/v1/engine/core.py", "EngineCoreProc.run_busy_loop", 680)], "idle"),
    ("vLLM stepping", [(f"{SITE}/vllm/v1/engine/core.py", "EngineCoreProc._process_engine_step", 720),
                       (f"{SITE}/vllm/v1/engine/core.py", "EngineCoreProc.run_busy_loop", 681)], "compute"),
    ("dcp writer", [(f"{SITE}/torch/distributed/checkpoint/filesystem.py", "_write_files_from_queue", 400),
                    (f"{STDLIB}/threading.py", "Thread.run", 975)], "checkpoint"),
    ("idle queue.get in user loop", [(f"{STDLIB}/threading.py", "Condition.wait", 320),
                                     (f"{STDLIB}/queue.py", "Queue.get", 171),
                                     (USER, "serve", 40)], "idle"),
    ("pinned-memory data queue", [(f"{STDLIB}/threading.py", "Condition.wait", 320),
                                  (f"{STDLIB}/queue.py", "Queue.get", 171),
                                  (f"{SITE}/torch/utils/data/dataloader.py", "_MultiProcessingDataLoaderIter._try_get_data", 1291),
                                  (f"{SITE}/torch/utils/data/dataloader.py", "_MultiProcessingDataLoaderIter._get_data", 1454),
                                  (USER, "train", 12)], "data_wait"),
    ("socket read below user code", [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
                                     (USER, "fetch_remote", 33)], "data_wait"),
    ("Jupyter kernel idle", [(f"{STDLIB}/selectors.py", "EpollSelector.select", 468),
                             (f"{STDLIB}/asyncio/base_events.py", "BaseEventLoop._run_once", 1898),
                             (f"{SITE}/ipykernel/kernelapp.py", "IPKernelApp.start", 739)], "idle"),
    ("pre-3.11 bare names", [(f"{SITE}/torch/utils/data/dataloader.py", "_try_get_data", 1291),
                             (USER, "train", 12)], "data_wait"),
    # negatives: names alone in user code mean nothing
    ("user function named save", [(USER, "save", 5), (USER, "train", 50)], "unknown"),
    ("user function named load_checkpoint", [(USER, "load_checkpoint", 5)], "unknown"),
    ("user file named dataloader.py", [("/home/me/dataloader.py", "_MultiProcessingDataLoaderIter._try_get_data", 3)], "unknown"),
    ("user module named serialization", [("/home/me/torch/serialization.py.bak", "save", 3)], "unknown"),
    ("torch.load is not a checkpoint save", [(f"{SITE}/torch/serialization.py", "load", 1500),
                                              (USER, "main", 3)], "data_wait"),
    ("evaluate word inside a name", [(USER, "reevaluated_lr", 3)], "unknown"),
]


@pytest.mark.parametrize("what,frames,expected", CASES, ids=[c[0] for c in CASES])
def test_signatures_and_negatives(what, frames, expected):
    result = classify(stack(*frames, active=True), gpu_busy=False, source_line=no_source)
    assert result.phase == expected, (what, result)


def test_user_eval_function_is_eval_and_names_the_line():
    result = classify(stack((f"{SITE}/torch/nn/modules/linear.py", "Linear.forward", 134),
                            ("/home/me/loop.py", "run_validation", 88),
                            ("/home/me/loop.py", "main", 120)), gpu_busy=False, source_line=no_source)
    assert result.phase == "eval"
    assert result.frame == Frame("run_validation", "/home/me/loop.py", 88)


def test_source_line_calls(open_folder):
    src = open_folder / "job.py"
    src.write_text("x = f.read(4096)\nos.fsync(fd)\ntime.sleep(5)\nloss.item()\ny = a + b\n")
    for line, expected in ((1, "data_wait"), (2, "checkpoint"), (3, "idle"), (4, "sync"), (5, "unknown")):
        threads = stack((str(src), "body", line), active=True)
        assert classify(threads, gpu_busy=False).phase == expected, line


def test_empty_stack():
    assert classify([], gpu_busy=False).phase == "unknown"
    assert classify([], gpu_busy=True).phase == "compute"


def test_classifier_does_not_know_our_demo_workloads():
    for module in (phases, stack_rules, host_signals, source_lines):
        text = Path(module.__file__).read_text()
        for name in ("daemon/sim", "daemon.sim", "read_shard", "Almanac", "ShardStream",
                     "loader_starved"):
            assert name not in text, (module.__name__, name)


# -- signals: a blocking call into C seen from outside ---------------------------------------

# A user line that calls into C and leaves no Python frame below it (pickle.dump, array.tofile).
OPAQUE = [("/home/me/snap.py", "persist_state", 21), ("/home/me/snap.py", "main", 40)]


def signals(**kw) -> HostSignals:
    kw.setdefault("seconds", 3.0)
    kw.setdefault("main_thread_cpu", 0.0)
    kw.setdefault("process_cpu", 0.0)
    kw.setdefault("gpu_busy", False)
    return HostSignals(**kw)


def opaque(**kw) -> Classification:
    kw.setdefault("repeated_leaf", True)
    return classify(stack(*OPAQUE), gpu_busy=False, source_line=no_source, **kw)


def test_writing_in_a_c_call_while_the_gpu_idles_is_a_checkpoint_not_a_sync():
    # The pickle.dump case: before signals, the repeating line read as a host sync.
    assert opaque().phase == "sync"
    result = opaque(signals=signals(write_per_s=180e6, main_thread_cpu=0.3))
    assert result.phase == "checkpoint"
    assert "writing 180 MB/s" in result.reason
    assert result.frame == Frame("persist_state", "/home/me/snap.py", 21)


def test_reading_or_d_state_while_the_gpu_idles_is_data_wait():
    assert opaque(signals=signals(read_per_s=6e6)).phase == "data_wait"
    blocked = opaque(signals=signals(d_state=True))
    assert blocked.phase == "data_wait" and "D state" in blocked.reason
    assert opaque(signals=signals(iowait_growing=True)).phase == "data_wait"
    # A trickle of reads (a config file, a log tail) is not the input pipeline.
    assert opaque(signals=signals(read_per_s=20e3)).phase != "data_wait"


def test_importing_at_start_up_in_d_state_is_not_data_wait():
    """A profiled command's first second: a zip archive on sys.path read by its path hook, in
    D state, with no importlib frame left above it. Start-up, not the input pipeline (it gave a
    fixed training script a 'prefetch in DataLoader workers' at 6% data wait)."""
    for frames in ([("<frozen zipimport>", "_read_directory", 416),
                    ("<frozen zipimport>", "zipimporter.__init__", 94)],
                   [("<frozen importlib._bootstrap_external>", "FileLoader.get_data", 1131),
                    (USER, "main", 2)]):
        result = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                          signals=signals(d_state=True, read_per_s=6e6))
        assert result.phase != "data_wait", (frames, result)
        assert "start-up" in result.reason


def test_main_thread_on_cpu_with_no_io_is_host_compute():
    result = opaque(signals=signals(main_thread_cpu=0.95, process_cpu=0.97))
    assert result.phase == "host_preprocess"
    assert "main thread on-CPU 95%" in result.reason
    # A busy loader thread beside a blocked main thread is not the main thread computing.
    assert opaque(signals=signals(main_thread_cpu=0.02, process_cpu=1.0)).phase != "host_preprocess"
    # Without the main thread's clock (a worker), the process's CPU stands in.
    assert opaque(signals=signals(main_thread_cpu=None, process_cpu=0.9)).phase == "host_preprocess"


# A loop written without mlcost in mind (probe 120's train_slow.py): each step reads a small
# compressed record (a millisecond, from the page cache), then decodes and "augments" it in
# Python on the main thread. The process reads 2-3 MB/s over the seconds the signals cover;
# its time goes to the decoding.
DECODING_LOOP = {
    "<listcomp>": "    out = [((x * 31) ^ 0x5A) & 255 for x in out]",
    "decode": "    vals = json.loads(zlib.decompress(raw))",
    "synth": "    raw = zlib.compress(json.dumps([rnd.random() for _ in range(20000)]).encode())",
}


def decoding_source(frame: Frame) -> str | None:
    if frame.name.endswith("<listcomp>"):
        return DECODING_LOOP["synth" if frame.line == 7 else "<listcomp>"]
    return DECODING_LOOP.get(frame.name.rsplit(".", 1)[-1])


def test_a_loop_caught_decoding_in_python_is_host_compute_though_it_reads_a_little():
    """It read 'reading 2.41 MB/s while the GPU idles' (data wait), and the rules offered a
    thread pool, which cannot run Python in parallel."""
    reads = signals(read_per_s=2.4e6, main_thread_cpu=0.5, process_cpu=0.5)
    in_listcomp = classify(stack((USER, "decode.<locals>.<listcomp>", 14), (USER, "decode", 14),
                                 (USER, "main", 26), active=True),
                           gpu_busy=False, source_line=decoding_source, signals=reads)
    assert in_listcomp.phase == "host_preprocess", in_listcomp
    assert "running Python (a comprehension, train.py:14" in in_listcomp.reason
    in_json = classify(stack((f"{STDLIB}/json/decoder.py", "JSONDecoder.raw_decode", 353),
                             (f"{STDLIB}/json/decoder.py", "JSONDecoder.decode", 337),
                             (f"{STDLIB}/json/__init__.py", "loads", 346),
                             (USER, "decode", 10), (USER, "main", 26), active=True),
                       gpu_busy=False, source_line=decoding_source, signals=reads)
    assert in_json.phase == "host_preprocess" and "parsing JSON" in in_json.reason, in_json
    # A read on the comprehension's own text is still a read, and a read in C on a user line
    # (no frame below it) still goes by the signals: one caught off its CPU (blocked in its
    # read), in a process mostly off its CPU, waits.
    reading = classify(stack((USER, "load.<locals>.<listcomp>", 3), (USER, "load", 3),
                             active=True), gpu_busy=False, signals=reads,
                       source_line=lambda f: "    blobs = [f.read() for f in files]")
    assert reading.phase == "data_wait", reading
    waits = signals(read_per_s=2.4e6, main_thread_cpu=0.1, process_cpu=0.1)
    opaque_read = classify(stack((USER, "load", 3)), gpu_busy=False, signals=waits,
                           source_line=lambda f: "    batch = pickle.load(fh)")
    assert opaque_read.phase == "data_wait", opaque_read


def test_a_main_thread_on_a_cpu_that_reads_a_little_computes_one_that_reads_much_waits():
    """A C call on the user's line (`out.sort()`, or `pickle.load(fh)`) leaves no frame: the
    signals say which. Half a core for 2.4 MB/s is a CPU spent on something else than reading
    (it read as data wait, with a thread pool offered); the same core for 200 MB/s copies
    input, and a process off its CPU waits for what it reads."""
    def at(read_per_s, cpu):
        return classify(stack((USER, "decode", 15), active=True), gpu_busy=False,
                        source_line=lambda f: "    out.sort()",
                        signals=signals(read_per_s=read_per_s, main_thread_cpu=cpu,
                                        process_cpu=cpu, tree_cpu=cpu))
    assert at(2.4e6, 0.55).phase == "host_preprocess"
    assert at(200e6, 0.9).phase == "data_wait"
    assert at(6e6, 0.1).phase == "data_wait"  # 60 MB per CPU-second: what it waits on
    # Caught on a CPU at that line, under half of the seconds the signals cover (the GPU's
    # steps are in them): 1.09 MB/s at 0.45 of a core is still no read it waits on (probe
    # 120's `out.sort()` samples); caught off its CPU, or reading 200 MB/s, it waits.
    assert at(1.09e6, 0.45).phase == "host_preprocess"
    assert at(200e6, 0.45).phase == "data_wait"
    off_cpu = classify(stack((USER, "decode", 15), active=False), gpu_busy=False,
                       source_line=lambda f: "    out.sort()",
                       signals=signals(read_per_s=1.09e6, main_thread_cpu=0.45,
                                       process_cpu=0.45, tree_cpu=0.45))
    assert off_cpu.phase == "data_wait", off_cpu
    # The /proc fallback (no stacks) reads the signals the same way.
    from_proc = classify_from_proc(None, signals(read_per_s=2.4e6, main_thread_cpu=0.55,
                                                 process_cpu=0.55, tree_cpu=0.55))
    assert from_proc.phase == "host_preprocess", from_proc


def test_a_line_that_joins_a_path_or_strings_is_not_waiting_on_a_thread():
    """`save_checkpoint({"w": bytes(weights)}, os.path.join(d, "model.pt"))`, caught copying
    the weights (C): it read 'sleeping or waiting' (idle) by its `.join(` (probe 120 F22)."""
    def on(line, **said):
        return classify(stack((USER, "main", 23), active=True), gpu_busy=False,
                        source_line=lambda f: line, signals=signals(**said))
    line = '    save_checkpoint({"w": bytes(weights)}, os.path.join(a.ckpt_dir, "model.pt"))'
    copy = on(line, main_thread_cpu=0.3, process_cpu=0.3)  # (before its write begins)
    assert copy.phase != "idle" and "sleeping" not in copy.reason, copy
    assert on(line, write_per_s=11e6, main_thread_cpu=0.6, process_cpu=0.6).phase == "checkpoint"
    assert on('    name = "-".join(parts)', main_thread_cpu=0.3).phase != "idle"
    # A thread's or a process's join still waits.
    for line in ("    loader.join()", "    p.join(5)", "    w.join(timeout=self.join_timeout)"):
        assert on(line).phase == "idle", line


def test_a_list_built_inside_a_json_dumps_call_is_not_writing_output():
    """`raw = zlib.compress(json.dumps([rnd.random() ...]))`, caught in the list comprehension:
    it read 'writing output (serializing records)' at 38%, with 'buffer it, write
    asynchronously' for a line that writes nothing."""
    result = classify(stack((USER, "synth.<locals>.<listcomp>", 7), (USER, "synth", 7),
                            (USER, "main", 26), active=True),
                      gpu_busy=False, source_line=decoding_source,
                      signals=signals(main_thread_cpu=0.9, process_cpu=0.9))
    assert result.phase == "host_preprocess", result
    # A comprehension that formats what its line writes is writing output (the corpus's
    # write_embeddings.py, caught in its generator).
    formats = classify(stack((USER, "save.<locals>.<genexpr>", 25), (USER, "save", 25),
                             active=True), gpu_busy=False,
                       signals=signals(main_thread_cpu=0.9, process_cpu=0.9),
                       source_line=lambda f: '        out.write(f"{doc_id}\\t" + " ".join('
                                             'f"{x:.6f}" for x in vector) + "\\n")')
    assert formats.phase == "output", formats
    # The line itself (the call under way once the list is built) is still the JSON it writes.
    outer = classify(stack((USER, "synth", 7), (USER, "main", 26), active=True),
                     gpu_busy=False, source_line=decoding_source,
                     signals=signals(main_thread_cpu=0.9, process_cpu=0.9))
    assert outer.phase == "output", outer


def test_a_main_thread_that_mostly_waits_for_a_core_is_not_host_compute():
    # Recorded at load ~31 on 2 cores: over 3 s the main thread ran 0.096 s and waited on a
    # run queue 2.043 s (schedstat). Its demand is ~10%, not the 71% that counting the wait
    # as running gave; the reason says the host's load kept the GPU waiting.
    said = signals(main_thread_cpu=cpu_demand(0.096, 2.043, 3.0), main_thread_queued=0.681,
                   process_cpu=0.2)
    # py-spy reads a runnable thread (state R, queued or not) as active.
    result = classify(stack(*OPAQUE, active=True), gpu_busy=False, source_line=no_source,
                      signals=said)
    assert result.phase not in ("host_preprocess", "idle"), result
    assert "waiting for a CPU core 68% of the time" in result.reason
    # The same line in sample after sample, its GPU busy: it queues for a core, no host sync.
    queued = classify(stack(*OPAQUE, active=True), gpu_busy=False, source_line=no_source,
                      signals=dataclasses.replace(said, gpu_busy=True),
                      repeated_leaf=True)
    assert queued.phase == "compute", queued
    assert "waiting for a CPU core 68%" in queued.reason
    # A CPU-bound thread that got a core 6% of the time is still host compute.
    busy = signals(main_thread_cpu=cpu_demand(0.18, 2.82, 3.0), main_thread_queued=0.94)
    assert opaque(signals=busy).phase == "host_preprocess"


def test_host_compute_under_no_grad_decorator_is_eval():
    frames = [(f"{SITE}/torch/nn/modules/linear.py", "Linear.forward", 134),
              ("/home/me/score.py", "Scorer.forward", 22),
              (f"{SITE}/torch/nn/modules/module.py", "Module._call_impl", 1750),
              ("/home/me/score.py", "score_holdout", 29),
              (f"{SITE}/torch/utils/_contextlib.py", "context_decorator.<locals>.decorate_context", 116),
              ("/home/me/score.py", "main", 44)]
    result = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                      signals=signals(main_thread_cpu=0.9))
    assert result.phase == "eval" and "inference_mode" in result.reason
    assert result.frame == Frame("Scorer.forward", "/home/me/score.py", 22)


def test_waiting_on_an_idle_gpu_is_not_a_sync_and_on_a_busy_one_is():
    idle = opaque(signals=signals(gpu_busy=False))
    assert idle.phase == "idle" and "not a sync" in idle.reason
    busy = opaque(signals=signals(gpu_busy=True))
    assert busy.phase == "sync" and "GPU busy" in busy.reason


def test_library_frames_still_come_before_signals():
    # A DataLoader waiting on its workers is data wait even while its pipes read a lot.
    frames = [(f"{SITE}/torch/utils/data/dataloader.py", "_MultiProcessingDataLoaderIter._try_get_data", 1291),
              (USER, "train", 12)]
    result = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                      signals=signals(write_per_s=50e6))
    assert result.phase == "data_wait" and "DataLoader" in result.reason


def test_every_classification_says_why():
    for _what, frames, _expected in CASES:
        result = classify(stack(*frames, active=True), gpu_busy=False, source_line=no_source,
                          signals=signals())
        assert result.reason


# -- live: a starved DataLoader, its main process and its workers -----------------------------


@pytest.mark.skipif(find_py_spy() is None or os.geteuid() != 0, reason="needs py-spy and root")
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the workload needs torch")
def test_live_starved_loader_main_waits_and_worker_reads(tmp_path):
    # killed at the end: what it makes in $TMPDIR (its shards, its GPU's folder) stays here
    proc = subprocess.Popen([sys.executable, str(WORKLOADS / "loader_starved.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, TMPDIR=str(tmp_path)))
    try:
        assert proc.stdout.readline().strip() == "READY"
        sampler = StackSampler(min_interval_s=0.0, global_max_per_s=100.0, cpu_budget_ratio=1.0)
        main_phase = worker_phase = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (main_phase == "data_wait" and worker_phase):
            main = asyncio.run(sampler.dump(proc.pid))
            assert main.status == "ok", main.error
            main_phase = classify(main.threads, gpu_busy=False).phase
            if main_phase == "data_wait" and waits_on_data_queue(main.threads):
                for wpid in worker_pids(proc.pid):
                    worker = asyncio.run(sampler.dump(wpid))
                    result = classify(worker.threads, gpu_busy=False)
                    if result.frame and result.frame.name == "ShardStream.__getitem__":
                        worker_phase = result.phase
            time.sleep(0.1)
        assert main_phase == "data_wait"
        assert worker_phase == "data_wait"
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()  # DataLoader workers and the slow-storage helper
        proc.kill()
        proc.wait()


# -- phase balance ---------------------------------------------------------------------------


def sample(phase: str, frames: tuple[Frame, ...], util: float = 0.0, ts: float = 0.0,
           reason: str = "") -> StackSample:
    return StackSample(ts=ts, pid=7, thread_id=1, stack_hash=stack_hash(frames), frames=frames,
                       phase=phase, gpu_util=util, reason=reason)


READ = (Frame("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 113), Frame("train", USER, 12))
SAVE = (Frame("save", f"{SITE}/torch/serialization.py", 1003), Frame("train", USER, 40))
SAVE2 = (Frame("save", f"{SITE}/torch/serialization.py", 1003), Frame("train", USER, 41))


def test_phase_balance_splits_quiet_time_by_samples_and_busy_time_is_compute():
    samples = [sample("data_wait", READ)] * 6 + [sample("checkpoint", SAVE)] * 3 + [
        sample("checkpoint", SAVE2, util=50.0)]
    out = phase_balance(samples, window_s=100.0, busy_seconds=60.0)
    assert list(out) == ["compute", "data_wait", "checkpoint"]
    assert out["compute"]["seconds"] == pytest.approx(60.0)
    assert out["data_wait"]["seconds"] == pytest.approx(24.0)
    assert out["checkpoint"]["seconds"] == pytest.approx(16.0)
    assert sum(p["seconds"] for p in out.values()) == pytest.approx(100.0)
    assert sum(p["share"] for p in out.values()) == pytest.approx(1.0)
    assert out["compute"]["gpu_idle_seconds"] == 0.0
    assert out["data_wait"]["gpu_idle_seconds"] == pytest.approx(24.0)
    assert out["checkpoint"]["gpu_idle_seconds"] == pytest.approx(16.0 * (1 - 12.5 / 100))
    top = out["checkpoint"]["top_stacks"]
    assert [t["samples"] for t in top] == [3, 1]
    assert (top[0]["file"], top[0]["line"], top[0]["function"]) == (USER, 40, "train")
    assert top[0]["frames"][0] == f"{SITE}/torch/serialization.py:1003 save"
    assert out["data_wait"]["top_stacks"][0]["line"] == 12


def test_phase_balance_edges():
    assert phase_balance([], window_s=0.0, busy_seconds=0.0) == {}
    only_busy = phase_balance([], window_s=10.0, busy_seconds=10.0)
    assert list(only_busy) == ["compute"] and only_busy["compute"]["share"] == 1.0
    unsampled = phase_balance([], window_s=10.0, busy_seconds=4.0)
    assert unsampled["unknown"]["seconds"] == pytest.approx(6.0)
    assert unsampled["unknown"]["top_stacks"] == []
    clipped = phase_balance([sample("idle", READ)], window_s=10.0, busy_seconds=50.0)
    assert clipped["compute"]["seconds"] == 10.0 and "idle" not in clipped


def test_top_stacks_carry_the_reason_of_their_phase():
    samples = [sample("checkpoint", SAVE, reason="torch.save (serialization.py:1003 save)")] * 2 + [
        sample("checkpoint", SAVE, reason="writing 90 MB/s while the GPU idles"),
        sample("data_wait", READ)]
    out = phase_balance(samples, window_s=10.0, busy_seconds=0.0)
    assert out["checkpoint"]["top_stacks"][0]["reason"] == "torch.save (serialization.py:1003 save)"
    assert out["data_wait"]["top_stacks"][0]["reason"] is None  # a store written before reasons


def plain_balance(samples: list[StackSample], window_s: float,
                  busy_seconds: float) -> dict[str, dict[str, object]]:
    """phase_balance's arithmetic written the plain way, phase by phase (top stacks aside)."""
    if window_s <= 0:
        return {}
    busy = min(max(busy_seconds, 0.0), window_s)
    quiet = window_s - busy
    groups: dict[str, list[StackSample]] = {}
    for s in samples:
        groups.setdefault(s.phase if s.phase in PHASES else "unknown", []).append(s)
    seconds = {"compute": busy}
    idle = {"compute": 0.0}
    if not groups:
        seconds["unknown"] = idle["unknown"] = quiet
    for phase, group in groups.items():
        spent = quiet * (len(group) / len(samples))
        mean = math.fsum(min(max(s.gpu_util, 0.0), 100.0) for s in group) / len(group) / 100.0
        seconds[phase] = seconds.get(phase, 0.0) + spent
        idle[phase] = idle.get(phase, 0.0) + spent * (1.0 - mean)
    order = sorted(seconds, key=lambda p: (-seconds[p], PHASES.index(p)))
    return {p: {"seconds": seconds[p], "share": seconds[p] / window_s,
                "gpu_idle_seconds": idle[p]} for p in order if seconds[p] > 0}


def test_phase_balance_is_the_plain_sums_phase_by_phase():
    import random

    rnd = random.Random(23)
    stacks = [READ, SAVE, SAVE2, (Frame("wait", "<proc>", 0),)]
    for _ in range(3000):
        samples = [sample(rnd.choice([*PHASES, "not a phase"]), rnd.choice(stacks),
                          util=rnd.choice([0.0, 12.5, 33.3, 100.0, 150.0, -5.0]))
                   for _ in range(rnd.randint(0, 9))]
        window = rnd.choice([0.0, 1.0, 30.0, 1800.0, rnd.uniform(0.0, 100.0)])
        busy = rnd.choice([0.0, -1.0, window, window / 3, 2 * window, rnd.uniform(0.0, 100.0)])
        out = phase_balance(samples, window_s=window, busy_seconds=busy)
        assert {p: {k: part[k] for k in ("seconds", "share", "gpu_idle_seconds")}
                for p, part in out.items()} == plain_balance(samples, window, busy)
        assert list(out) == list(plain_balance(samples, window, busy))


def test_a_tally_taken_down_is_the_split_of_what_is_left_whatever_the_order():
    """A live balance adds each sample to its process's tally as it comes and removes it as
    it ages out; the split is then exactly the one of the samples left, mean utilization
    included (kept as an exact sum), in whatever order they came and went."""
    import random

    rnd = random.Random(5)
    stacks = [READ, SAVE, SAVE2, (Frame("wait", "<proc>", 0),)]
    for _ in range(500):
        samples = [sample(rnd.choice([*PHASES, "not a phase"]), rnd.choice(stacks),
                          util=rnd.choice([0.0, 12.5, 33.3, 0.1, 100.0, 150.0, -5.0,
                                           float("nan")]),
                          reason=rnd.choice(["", "a", "b"]))
                   for _ in range(rnd.randint(0, 30))]
        tally = SampleTally()
        for s in rnd.sample(samples, len(samples)):
            tally.add(s)
        gone = rnd.sample(samples, rnd.randint(0, len(samples)))
        for s in gone:
            tally.remove(s)
        left = list(samples)
        for s in gone:
            left.remove(s)
        assert tally.split() == sample_split(left) == sample_split(reversed(left))
        assert tally.count == len(left)


def test_a_stack_s_reason_is_its_most_frequent_one_and_the_first_in_order_among_equals():
    """The same whichever sample came first: a balance from the store and one kept live
    agree."""
    first = [sample("idle", READ, reason="b"), sample("idle", READ, reason="a")]
    for samples in (first, first[::-1]):
        out = phase_balance(samples, window_s=10.0, busy_seconds=0.0)
        assert out["idle"]["top_stacks"][0]["reason"] == "a"
    out = phase_balance(first + [sample("idle", READ, reason="b")], 10.0, 0.0)
    assert out["idle"]["top_stacks"][0]["reason"] == "b"


def test_a_stack_seen_before_a_runtime_declared_itself_is_decided_anew():
    """What a stack's top-stack entry says is worked out once per stack, and again once a GPU
    runtime declares itself: its frames are no longer the user's."""
    runtime = "/opt/declared_runtime/launch.py"
    frames = (Frame("launch", runtime, 7), Frame("train", USER, 40))
    samples = [sample("compute", frames)]
    before = phase_balance(samples, window_s=10.0, busy_seconds=0.0)
    assert before["compute"]["top_stacks"][0]["file"] == runtime
    stack_rules.register_runtime("/opt/declared_runtime/*", "launch", "compute", "its launch")
    try:
        after = phase_balance(samples, window_s=10.0, busy_seconds=0.0)
        assert after["compute"]["top_stacks"][0]["file"] == USER
        assert after["compute"]["top_stacks"][0]["line"] == 40
    finally:
        stack_rules._RUNTIME_FRAME_RULES.pop()


# -- writing output: told by frames and lines, never by a write rate -------------------------

JSON_APPEND = [(f"{STDLIB}/json/encoder.py", "JSONEncoder.encode", 200),
               (f"{STDLIB}/json/__init__.py", "dumps", 231),
               ("/home/me/events.py", "append_events", 21), ("/home/me/events.py", "main", 50)]


@pytest.mark.parametrize("load", [
    signals(write_per_s=6e6, main_thread_cpu=0.4),  # a quiet host: the writes go fast
    signals(write_per_s=0.8e6, main_thread_cpu=0.97, process_cpu=0.99),  # load 7-16 on 2 cores
], ids=["quiet", "loaded"])
def test_a_json_lines_appender_is_writing_output_on_a_quiet_and_a_loaded_host(load):
    result = classify(stack(*JSON_APPEND, active=True), gpu_busy=False, source_line=no_source,
                      signals=load)
    assert result.phase == "output", result
    assert "json" in result.reason.lower()
    assert result.frame == Frame("append_events", "/home/me/events.py", 21)


def test_csv_and_logging_frames_are_writing_output():
    for frames in ([(f"{STDLIB}/csv.py", "DictWriter.writerows", 157), (USER, "record", 9)],
                   [(f"{STDLIB}/logging/__init__.py", "StreamHandler.flush", 1113),
                    (f"{STDLIB}/logging/__init__.py", "Logger.info", 1489), (USER, "step", 3)]):
        result = classify(stack(*frames, active=True), gpu_busy=False, source_line=no_source,
                          signals=signals(main_thread_cpu=0.99))
        assert result.phase == "output", (frames, result)


def test_text_record_writes_and_their_fsync_are_output_binary_writes_stay_checkpoints(
        open_folder):
    src = open_folder / "job.py"
    src.write_text(
        "def save_vectors(out, rows):\n"                                   # 1
        "    for i, row in rows:\n"                                         # 2
        "        out.write(f'{i}\\t' + ' '.join(map(str, row)) + '\\n')\n"  # 3
        "    out.flush()\n"                                                 # 4
        "    os.fsync(out.fileno())\n"                                      # 5
        "def persist(state, fh):\n"                                         # 6
        "    pickle.dump(state, fh)\n"                                      # 7
        "    fh.flush()\n"                                                  # 8
        "    os.fsync(fh.fileno())\n"                                       # 9
        "    fh.write(blob)\n")                                             # 10
    for line, expected in ((3, "output"), (4, "output"), (5, "output"), (8, "checkpoint"),
                           (9, "checkpoint"), (10, "checkpoint")):
        result = classify(stack((str(src), "f", line), active=True), gpu_busy=False)
        assert result.phase == expected, (line, result)


def test_ranks_waiting_at_a_multiprocessing_barrier_wait_on_peers_not_a_sync():
    frames = [(f"{STDLIB}/multiprocessing/synchronize.py", "Condition.wait", 268),
              (f"{STDLIB}/threading.py", "Barrier._wait", 707),
              (f"{STDLIB}/threading.py", "Barrier.wait", 676), (USER, "run_rank", 31)]
    result = classify(stack(*frames), gpu_busy=False, source_line=no_source, repeated_leaf=True,
                      signals=signals())
    assert result.phase == "comm", result


def test_top_stack_is_in_the_function_with_most_samples_not_the_most_repeated_stack():
    # decode_frames.py: decoding spreads over three lines of unpack_frame (decompress, slice,
    # the comprehension); freeing the last result is one stack on the caller's line, more
    # frequent than any one decoding stack but less than all of them.
    src = "/home/me/decode.py"
    caller = Frame("main", src, 40)
    decode = [(Frame("unpack_frame", src, 22), caller),
              (Frame("unpack_frame", src, 25), caller),
              (Frame("unpack_frame.<locals>.<listcomp>", src, 26),
               Frame("unpack_frame", src, 26), caller)]
    samples = ([sample("host_preprocess", (caller,))] * 4
               + [sample("host_preprocess", d) for d in decode for _ in range(3)])
    top = phase_balance(samples, window_s=10.0, busy_seconds=0.0)["host_preprocess"]["top_stacks"]
    assert top[0]["function"].split(".<locals>.")[0] == "unpack_frame"
    assert [t["function"] for t in top][-1] == "main"  # still listed, after the decoder


# A main thread waiting for a compressor it started (subprocess.run -> Popen.wait): the child
# reads 48 MB and writes 24 MB a round, using ~1.5 CPU-seconds for it. On a quiet host it gets a
# whole core; at load 46 on 2 cores a twelfth of one, so its bytes a second fall below the
# wall-clock lines, but its bytes per CPU-second stay (bench/attribution_accuracy.py --load:
# ship_with_tool.py was a checkpoint quiet and data wait loaded).
WAITS_ON_TOOL = [(f"{STDLIB}/subprocess.py", "Popen._wait", 2053),
                 (f"{STDLIB}/subprocess.py", "Popen.wait", 1264),
                 (f"{STDLIB}/subprocess.py", "run", 550),
                 ("/home/me/ship.py", "ship_artifacts", 22), ("/home/me/ship.py", "main", 33)]


@pytest.mark.parametrize("share", [1.0, 1 / 12], ids=["quiet", "loaded"])
def test_io_lines_are_met_per_cpu_second_so_load_does_not_flip_the_phase(share):
    tool = signals(seconds=3.0, read_per_s=32e6 * share, write_per_s=16e6 * share,
                   tree_cpu=1.0 * share)
    result = classify(stack(*WAITS_ON_TOOL), gpu_busy=False, source_line=no_source,
                      signals=tool)
    assert result.phase == "checkpoint", result
    assert result.frame == Frame("ship_artifacts", "/home/me/ship.py", 22)


def test_a_trickle_over_a_sliver_of_cpu_is_no_stream():
    # 20 kB/s of log lines from a process that used 0.2% of a core: 10 MB per CPU-second, but
    # 60 kB in three seconds is no checkpoint nor input pipeline.
    trickle = signals(seconds=3.0, read_per_s=20e3, write_per_s=20e3, tree_cpu=0.002)
    assert opaque(signals=trickle).phase not in ("checkpoint", "data_wait")


def test_a_compressor_starved_to_a_twentieth_of_a_core_still_writes():
    # bench --load 4 at load 35-40 on 2 cores: 1.1 MB/s written and 2.2 MB/s read over 3 s by
    # a tool given 5% of a core, where the read alone made it data wait.
    starved = signals(seconds=3.0, read_per_s=2.2e6, write_per_s=1.1e6, tree_cpu=0.05)
    result = classify(stack(*WAITS_ON_TOOL), gpu_busy=False, source_line=no_source,
                      signals=starved)
    assert result.phase == "checkpoint" and "per CPU-second" in result.reason


# subprocess.run(capture_output=True) waits for its child in a select inside subprocess, not in
# waitpid: read as "waiting in select" it was one more idle loop, offered SIGTERM.
WAITS_ON_CAPTURED_TOOL = [(f"{STDLIB}/selectors.py", "_PollLikeSelector.select", 415),
                          (f"{STDLIB}/subprocess.py", "Popen._communicate", 2115),
                          (f"{STDLIB}/subprocess.py", "Popen.communicate", 1209),
                          (f"{STDLIB}/subprocess.py", "run", 550),
                          ("/home/me/clips.py", "reencode", 12), ("/home/me/clips.py", "main", 30)]


@pytest.mark.parametrize("frames", [WAITS_ON_TOOL, WAITS_ON_CAPTURED_TOOL],
                         ids=["waitpid", "communicate"])
def test_a_main_thread_waiting_for_its_child_process_says_so_and_whether_the_child_runs(frames):
    """A tool that reads or writes nothing (an encoder on a CPU, a download waiting on the
    network) leaves the wait idle for the GPU, with a reason the rules read (CHILD_WAIT): at the
    outermost subprocess call, the child seen on a CPU or not."""
    encoding = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                        signals=signals(tree_cpu=0.95, children_running=1))
    assert encoding.phase == "idle", encoding
    assert encoding.reason.startswith(f"{stack_rules.CHILD_WAIT} (subprocess.py:550 run)")
    assert encoding.reason.endswith("its child processes run on a CPU"), encoding
    assert encoding.frame == Frame(frames[-2][1], frames[-2][0], frames[-2][2])
    fetching = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                        signals=signals(tree_cpu=0.0))
    assert fetching.reason.startswith(stack_rules.CHILD_WAIT), fetching
    assert "no child of it seen on a CPU" in fetching.reason, fetching


# A parent that builds an index in a multiprocessing.Process and joins it, as py-spy dumps it
# (Python 3.11, the fork start method): os.waitpid is C, below Popen.poll. With a timeout the
# join waits on the child's sentinel in a select inside multiprocessing.connection.
MP_JOIN = [(f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.poll", 27),
           (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.wait", 43),
           (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.join", 149),
           ("/home/me/index.py", "main", 29)]
MP_JOIN_TIMEOUT = [(f"{STDLIB}/selectors.py", "_PollLikeSelector.select", 415),
                   (f"{STDLIB}/multiprocessing/connection.py", "wait", 947),
                   (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.wait", 40),
                   (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.join", 149),
                   ("/home/me/index.py", "main", 29)]


@pytest.mark.parametrize("frames", [MP_JOIN, MP_JOIN_TIMEOUT], ids=["join", "join-timeout"])
def test_a_parent_joining_its_multiprocessing_child_waits_for_a_child_it_started(frames):
    """Probe 109: Process.join read "waiting with its GPU idle and no I/O: not a sync" (the
    line repeats), and idle_gpu_held offered the SIGTERM to a parent whose child computed at
    50-100% of a core (host_idle too, while /v1/idle said active). It is a child wait, as
    subprocess's is: the child seen on a CPU or not."""
    building = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                        repeated_leaf=True, signals=signals(tree_cpu=0.95, children_running=1))
    assert building.phase == "idle", building
    assert building.reason.startswith(f"{stack_rules.CHILD_WAIT} (process.py:149 "
                                      "BaseProcess.join)"), building
    assert building.reason.endswith("its child processes run on a CPU"), building
    assert building.frame == Frame("main", "/home/me/index.py", 29)
    stalled = classify(stack(*frames), gpu_busy=False, source_line=no_source,
                       repeated_leaf=True, signals=signals(tree_cpu=0.0))
    assert stalled.reason.startswith(stack_rules.CHILD_WAIT), stalled
    assert "no child of it seen on a CPU" in stalled.reason, stalled


# Probe 152, H1: os.system and os.waitpid wait for their child in C, no frame below the user's
# line; os.spawnv waits in os.py's _spawnvef.
C_CHILD_WAITS = {
    "os.system": ("        os.system(f\"{sys.executable} fetch_child.py {url} {dest}\")", None),
    "os.waitpid": ("    os.waitpid(pid, 0)", None),
    "os.spawnv": ("    os.spawnv(os.P_WAIT, sys.executable, argv)",
                  [(f"{STDLIB}/os.py", "_spawnvef", 937), (f"{STDLIB}/os.py", "spawnv", 953)]),
}


@pytest.mark.parametrize("call", sorted(C_CHILD_WAITS))
@pytest.mark.parametrize("gpu_busy", [False, True], ids=["gpu-idle", "gpu-reading-busy"])
def test_a_main_thread_waiting_for_its_child_in_c_waits_for_a_child_it_started(call, gpu_busy):
    """A GPU process that downloads its eval set through os.system (or forks a worker and
    os.waitpid's it) read idle, "waiting with its GPU idle and no I/O", and the report offered
    its SIGTERM while `mlcostd idle` answered idle mid-download; in the seconds its GPU's
    reading still covered a warm-up kernel its line read `sync` and got host_sync advice (probe
    152, H1, M3). /proc says its main thread is blocked until a child exits (wait4): a child
    wait, at its line, the child seen on a CPU or not. With nothing from /proc, os.system's
    line stays what it was (no frame says it waits for a child)."""
    line, below = C_CHILD_WAITS[call]
    frames = [*(below or []), ("/home/me/train.py", "<module>", 7)]
    blocked = proc_state.CHILD_EXIT if below is None else None
    working = classify(stack(*frames), gpu_busy=False, source_line=lambda f: line,
                       repeated_leaf=True,
                       signals=signals(tree_cpu=0.2, children_running=1, gpu_busy=gpu_busy,
                                       gpu_held=True, main_thread_blocked_on=blocked))
    assert working.phase == "idle", working
    assert working.reason.startswith(f"{stack_rules.CHILD_WAIT} ("), working
    assert working.reason.endswith("its child processes run on a CPU"), working
    assert working.frame == Frame("<module>", "/home/me/train.py", 7)
    if below is None:
        assert "read from /proc" in working.reason, working
        unread = classify(stack(*frames), gpu_busy=False, source_line=lambda f: line,
                          repeated_leaf=True,
                          signals=signals(tree_cpu=0.2, children_running=1, gpu_held=True))
        assert not unread.reason.startswith(stack_rules.CHILD_WAIT), unread


def test_a_forked_child_holds_its_parents_start_frames_and_waits_for_no_child():
    """A forked child's stack holds its parent's copy of the frames that started it
    (Popen._launch under Process.start): its own wait (a queue) is its own, not a child wait."""
    child = [(f"{STDLIB}/threading.py", "Condition.wait", 327),
             (f"{STDLIB}/queue.py", "Queue.get", 171), ("/home/me/index.py", "build_index", 15),
             (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.run", 108),
             (f"{STDLIB}/multiprocessing/process.py", "BaseProcess._bootstrap", 314),
             (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen._launch", 71),
             (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.__init__", 19),
             (f"{STDLIB}/multiprocessing/context.py", "ForkProcess._Popen", 281),
             (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.start", 121),
             ("/home/me/index.py", "main", 28)]
    found = classify(stack(*child), gpu_busy=False, source_line=no_source,
                     signals=signals(tree_cpu=0.0))
    assert found.reason.startswith("waiting in Condition.wait"), found


def test_a_blocking_accept_on_the_users_line_waits_for_a_client():
    """A hand-rolled RPC server's `conn, _ = srv.accept()` is C: it read "waiting with its GPU
    idle and no I/O: not a sync", which names nothing it waits for."""
    frame = Frame("main", "/srv/rpc_main.py", 31)
    found = classify([ThreadStack(1, "MainThread", False, (frame,))], gpu_busy=False,
                     repeated_leaf=True, source_line=lambda f: "conn, _ = srv.accept()",
                     signals=signals())
    assert found.phase == "idle", found
    assert found.reason.startswith("waiting for a client to connect (accept)"), found


def test_signal_pause_on_the_users_line_waits_for_a_signal():
    """Probe 143 F8: a re-ranker poked with SIGUSR1 waits in `signal.pause()` (C); it read
    "waiting with its GPU idle and no I/O: not a sync", which names nothing it waits for."""
    frame = Frame("main", "/srv/reload_on_signal.py", 14)
    for code in ("signal.pause()", "signum = signal.sigwait({signal.SIGUSR1})"):
        found = classify([ThreadStack(1, "MainThread", False, (frame,))], gpu_busy=False,
                         repeated_leaf=True, source_line=lambda f, code=code: code,
                         signals=signals())
        assert found.phase == "idle", found
        assert found.reason.startswith("waiting for a signal (another process may poke it "
                                       f"to work, or it waits to be stopped): `{code}`"), found


def test_input_on_a_pipe_is_a_prompt_waiting_for_its_user_not_a_job_wait():
    """A notebook kernel's stdin is a pipe from Jupyter: a cell's input() waits for a person
    (the corpus's notebook_cells.py --cells input), idle as before, not a queue consumer."""
    frame = Frame("ask", "/srv/cell.py", 46)
    quiet = signals(main_thread_blocked_on="a pipe", main_thread_woke=False, tree_cpu=0.0)
    found = classify([ThreadStack(1, "MainThread", False, (frame,))], gpu_busy=False,
                     source_line=lambda f: "answer = input('Continue? [y/N] ')", signals=quiet)
    assert found.phase == "idle" and found.reason.startswith("sleeping or waiting"), found


def test_a_stopped_process_is_idle_because_it_is_stopped_not_syncing():
    """A loop stopped with SIGSTOP shows the line it stopped on in every dump; right after the
    stop its GPU's tick still read busy, and the repeating line read as a host sync (a sign of
    work, so it got no advice at all), then as "waiting with its GPU idle and no I/O"."""
    frame = Frame("main", "/srv/train.py", 16)
    threads = [ThreadStack(1, "MainThread", False, (frame,))]
    for busy in (True, False):
        found = classify(threads, gpu_busy=False, proc_state="T", repeated_leaf=True,
                         source_line=lambda f: "gpu.kernel(0.2)",
                         signals=signals(gpu_busy=busy))
        assert found.phase == "idle" and found.reason.startswith(phases.STOPPED), found
        assert found.frame == frame


@pytest.mark.parametrize("line", ["for line in jobs:", "line = sys.stdin.readline()"])
def test_a_main_thread_blocked_reading_a_pipe_waits_for_its_next_job_or_reads_input(line):
    """A read of a pipe in C leaves no Python frame: with nothing arriving over the tick, a
    worker waiting for its next job (JOB_WAIT, where the rules see a queue consumer); having
    woken, reading its input. Never a host sync, though its line repeats and its GPU's tick
    was busy (a FIFO worker read so right after each job, and got host_sync's patch)."""
    frame = Frame("main", "/srv/worker.py", 27)
    threads = [ThreadStack(1, "MainThread", False, (frame,))]
    quiet = signals(main_thread_blocked_on="a named pipe (FIFO)", main_thread_woke=False,
                    tree_cpu=0.0)
    found = classify(threads, gpu_busy=False, source_line=lambda f: line, repeated_leaf=True,
                     signals=quiet)
    assert found.phase == "idle", found
    assert found.reason.startswith(f"{stack_rules.JOB_WAIT} on a named pipe (FIFO) nothing "
                                   f"came to (`{line}`"), found
    woke = signals(main_thread_blocked_on="a pipe", main_thread_woke=True, tree_cpu=0.01,
                   gpu_busy=True)
    found = classify(threads, gpu_busy=False, source_line=lambda f: line, repeated_leaf=True,
                     signals=woke)
    assert found.phase == "data_wait" and found.reason == f"reading a pipe (`{line}`)", found


@pytest.mark.parametrize("line", ["fcntl.flock(lk, fcntl.LOCK_EX)", "lockf(fd, LOCK_EX)",
                                  "with_lock.acquire()"])
def test_a_main_thread_blocked_on_a_lock_says_it_waits_on_a_lock(line):
    """A job blocked in fcntl.flock read as "waiting with its GPU idle and no I/O", and was
    offered SIGTERM: the reason names the lock, so the rule looks first."""
    frame = Frame("<module>", "/srv/lock_job.py", 8)
    found = classify([ThreadStack(1, "MainThread", False, (frame,))], gpu_busy=False,
                     source_line=lambda f: line)
    assert found.phase == "idle"
    assert found.reason.startswith(stack_rules.LOCK_WAIT), found.reason
    slept = classify([ThreadStack(1, "MainThread", False, (frame,))], gpu_busy=False,
                     source_line=lambda f: "time.sleep(5)")
    assert slept.reason.startswith("sleeping or waiting")


@pytest.mark.parametrize("frames", [
    [(f"{STDLIB}/threading.py", "Condition.wait", 320),
     (f"{STDLIB}/threading.py", "Semaphore.acquire", 475)],
    [(f"{SITE}/filelock/_api.py", "BaseFileLock.acquire", 344)],
])
def test_a_lock_acquired_in_python_frames_is_a_lock_wait_too(frames):
    """filelock (the HF hub's and Triton's caches) and a semaphore wait in Python frames: they
    read as "waiting in Condition.wait" or a blocked main thread, and were offered SIGTERM."""
    found = classify(stack(*frames, (USER, "main", 12)), gpu_busy=False, source_line=None)
    assert found.phase == "idle" and found.reason.startswith(stack_rules.LOCK_WAIT), found


def test_a_waiting_main_thread_beside_a_busy_gpu_is_compute_a_reading_one_is_not():
    """A thread per GPU leaves the main thread in Thread.join while the GPU works: compute.
    But the GPU's share is the tick's, not the dump's moment: a main thread reading a batch
    stays data wait however busy the tick was (a starved loop reads, then runs its kernel)."""
    joined = stack((f"{STDLIB}/threading.py", "Thread._wait_for_tstate_lock", 1139),
                   (f"{STDLIB}/threading.py", "Thread.join", 1119), (USER, "main", 30))
    assert classify(joined, gpu_busy=False, source_line=None, busy_elsewhere=True).phase == \
        "compute"
    assert classify(joined, gpu_busy=False, source_line=None).phase == "idle"
    reading = stack((f"{STDLIB}/socket.py", "SocketIO.readinto", 706), (USER, "read_batch", 12))
    assert classify(reading, gpu_busy=False, source_line=None, busy_elsewhere=True).phase == \
        "data_wait"


# -- a loop fed by a reader thread through a queue.Queue -------------------------------------

QUEUE_GET = [(f"{STDLIB}/threading.py", "Condition.wait", 327),
             (f"{STDLIB}/queue.py", "Queue.get", 171),
             (USER, "train", 57)]
READER_LINE = ("/home/me/reader.py", "read_batches", 23)


def threads(main: list[tuple[str, str, int]], *others: tuple[list[tuple[str, str, int]], bool]
            ) -> list[ThreadStack]:
    """A main thread and other threads ((frames, active) each), frames innermost first."""
    made = [ThreadStack(1, "MainThread", False, tuple(Frame(n, f, ln) for f, n, ln in main))]
    for i, (frames, active) in enumerate(others, start=2):
        made.append(ThreadStack(i, f"worker-{i}", active,
                                tuple(Frame(n, f, ln) for f, n, ln in frames)))
    return made


THREAD_RUN = [(f"{STDLIB}/threading.py", "Thread.run", 982),
              (f"{STDLIB}/threading.py", "Thread._bootstrap_inner", 1045)]


def test_a_main_thread_waiting_on_a_queue_a_busy_reader_fills_waits_for_data():
    """A hand-written prefetcher: the reader decodes on a CPU (py-spy: active) while the loop
    waits in q.get(). Before, this read as idle ("waiting in Condition.wait") and the idle rule
    could offer to stop a starved job; the line to look at is the reader's."""
    found = classify(threads(QUEUE_GET, ([READER_LINE, *THREAD_RUN], True)), gpu_busy=False,
                     source_line=no_source)
    assert found.phase == "data_wait", found
    assert found.frame == Frame("read_batches", "/home/me/reader.py", 23)
    assert found.thread is not None and found.thread.thread_name == "worker-2"
    assert "'worker-2'" in found.reason and "reader.py:23 read_batches" in found.reason
    # a reader blocked reading a file (py-spy: not active), told by its line or its frames
    blocked = threads(QUEUE_GET, ([READER_LINE, *THREAD_RUN], False))
    assert classify(blocked, gpu_busy=False,
                    source_line=lambda f: "raw = shard.read(CHUNK)").phase == "data_wait"
    fetching = threads(QUEUE_GET, ([(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
                                    (f"{STDLIB}/http/client.py", "HTTPResponse.read", 466),
                                    READER_LINE, *THREAD_RUN], False))
    assert classify(fetching, gpu_busy=False, source_line=no_source).phase == "data_wait"
    # an Event or a Future's result is the same hand-over
    on_event = [(f"{STDLIB}/threading.py", "Condition.wait", 327),
                (f"{STDLIB}/threading.py", "Event.wait", 629), (USER, "train", 57)]
    assert classify(threads(on_event, ([READER_LINE, *THREAD_RUN], True)), gpu_busy=False,
                    source_line=no_source).phase == "data_wait"


# Other threads beside a main thread in q.get() that do no work for it: the process waits.
NOT_WORKING = {
    "blocked, nothing known": ([READER_LINE, *THREAD_RUN], False, no_source),
    "waiting itself, though py-spy said active": (
        [(f"{STDLIB}/threading.py", "Condition.wait", 327),
         (f"{STDLIB}/threading.py", "Event.wait", 629), READER_LINE, *THREAD_RUN], True,
        no_source),
    "sleeping on its line": ([READER_LINE, *THREAD_RUN], False, lambda f: "time.sleep(1)"),
    "a server's accept loop": (
        [(f"{STDLIB}/selectors.py", "EpollSelector.select", 468),
         (f"{STDLIB}/socketserver.py", "BaseServer.serve_forever", 233),
         ("/srv/app.py", "serve", 40), *THREAD_RUN], False, no_source),
    "a handler waiting for its client's next request": (
        [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706), ("/srv/app.py", "handle", 51),
         *THREAD_RUN], False, no_source),
    "a handler in recv on its line": (
        [("/srv/app.py", "handle", 52), *THREAD_RUN], False, lambda f: "data = conn.recv(4096)"),
    "a request handler parsing a request on a CPU": (
        [("/srv/app.py", "Handler.do_POST", 28),
         (f"{STDLIB}/http/server.py", "BaseHTTPRequestHandler.handle_one_request", 424),
         (f"{STDLIB}/socketserver.py", "ThreadingMixIn.process_request_thread", 691),
         *THREAD_RUN], True, no_source),
    "a library's own busy thread (no user frame)": (
        [(f"{SITE}/wandb/sdk/internal/sender.py", "SendManager.send", 300), *THREAD_RUN], True,
        no_source),
    "a checkpoint writer": (
        [(f"{SITE}/torch/serialization.py", "save", 850), ("/home/me/ckpt.py", "save_async", 9),
         *THREAD_RUN], True, no_source),
    "a logger writing output": ([("/home/me/log.py", "flush_metrics", 14), *THREAD_RUN], True,
                                lambda f: "out.write(json.dumps(record) + '\\n')"),
}


@pytest.mark.parametrize("what", sorted(NOT_WORKING))
def test_a_main_thread_waiting_on_a_queue_nobody_works_for_stays_idle(what):
    """A server whose main thread waits on a queue for requests, or a job whose other threads
    wait too, is idle: no other thread works on input."""
    frames, active, source_line = NOT_WORKING[what]
    found = classify(threads(QUEUE_GET, (frames, active)), gpu_busy=False,
                     source_line=source_line)
    assert found.phase == "idle", (what, found)
    assert found.thread is None and found.frame == Frame("train", USER, 57)


# -- a queue.SimpleQueue (its get is C), a broker's queue, a job server's socket ---------------

PRODUCER_LINE = ("/home/me/augment.py", "augment", 31)


def lines(**by_name: str):
    """A source reader that gives each function's line (by the frame's function name)."""
    return lambda frame: by_name.get(frame.name)


def test_a_main_thread_in_a_simple_queue_get_that_busy_producers_fill_waits_for_data():
    """Producer threads decode in Python while the loop waits in a queue.SimpleQueue's get,
    which is C: no queue.py frame, only the user's line. It read 'sleeping or waiting' (idle),
    and the idle rule offered the SIGTERM for a job whose producers kept a core busy."""
    main = [(USER, "train", 57)]
    reading = lines(train="batch = batches.get()", augment="out = [flip(row) for row in img]")
    found = classify(threads(main, ([PRODUCER_LINE, *THREAD_RUN], True)), gpu_busy=False,
                     source_line=reading)
    assert found.phase == "data_wait", found
    assert found.frame == Frame("augment", "/home/me/augment.py", 31)
    assert "queue.SimpleQueue" in found.reason and "'worker-2'" in found.reason, found.reason
    # with a timeout, or block=True, it is the same hand-over
    for line in ("batch = batches.get(timeout=5)", "batch = batches.get(True)"):
        assert classify(threads(main, ([PRODUCER_LINE, *THREAD_RUN], True)), gpu_busy=False,
                        source_line=lines(train=line)).phase == "data_wait", line
    # nobody works for it: it waits for nothing, idle as before
    assert classify(threads(main, ([PRODUCER_LINE, *THREAD_RUN], False)), gpu_busy=False,
                    source_line=reading).phase == "idle"
    # a dict's get is no wait
    assert classify(threads(main, ([PRODUCER_LINE, *THREAD_RUN], True)), gpu_busy=False,
                    source_line=lines(train="lr = config.get('lr')")).phase != "data_wait"
    # its GPU busy meanwhile (a thread per GPU): compute, as for a queue.Queue
    assert classify(threads(main, ([PRODUCER_LINE, *THREAD_RUN], True)), gpu_busy=False,
                    source_line=reading, busy_elsewhere=True).phase != "data_wait"


# Two producer threads decoding and augmenting in Python, as py-spy 0.4 dumps them (Python
# 3.11, tests/daemon/workloads/augment_pipeline.py): the one that runs holds the GIL, the other
# waits for it and py-spy often calls it active all the same.
AUGMENTING = [(f"{STDLIB}/random.py", "Random.gauss", 597),
              ("/home/me/augment.py", "augment.<locals>.<listcomp>.<listcomp>", 31),
              ("/home/me/augment.py", "augment.<locals>.<listcomp>", 31),
              ("/home/me/augment.py", "augment", 31), ("/home/me/augment.py", "produce", 41),
              *THREAD_RUN]


def producers(*states: tuple[bool, bool]) -> list[ThreadStack]:
    """A main thread in a queue.SimpleQueue's get and one producer per (active, owns_gil)."""
    made = [ThreadStack(1, "MainThread", False, (Frame("train", USER, 57),))]
    made += [ThreadStack(i, f"producer-{i}", active, tuple(Frame(n, f, ln)
                                                           for f, n, ln in AUGMENTING),
                         owns_gil=gil) for i, (active, gil) in enumerate(states, start=2)]
    return made


def test_a_loop_fed_by_producers_running_python_names_the_one_holding_the_gil():
    """The thread the loop waits for is the one that runs: of two Python producers, the one
    holding the GIL (py-spy calls the other active too, as it waits for the GIL), and the
    reason says so, for the prefetch patch to offer processes rather than threads."""
    queued = lines(train="batch = batches.get()")
    found = classify(producers((True, False), (True, True)), gpu_busy=False,
                     source_line=queued)
    assert found.phase == "data_wait", found
    assert found.thread is not None and found.thread.thread_name == "producer-3", found
    assert found.reason.endswith(
        f"{stack_rules.WORKS_ON_INPUT}{stack_rules.PYTHON_ON_CPU} (augment.py:31 augment."
        "<locals>.<listcomp>.<listcomp>)"), found.reason
    # no producer holds the GIL (C code that released it: zlib, a large numpy op): the first
    # that works, on a CPU, no GIL said
    free = classify(producers((False, False), (True, False)), gpu_busy=False,
                    source_line=queued)
    assert free.phase == "data_wait" and free.thread is not None, free
    assert free.thread.thread_name == "producer-3"
    assert "running on a CPU (py-spy: active)" in free.reason
    assert stack_rules.PYTHON_ON_CPU not in free.reason
    # a reader in its read on its line (a C call, no Python frame), whatever py-spy said of
    # the GIL as the read began: reading
    reader = ThreadStack(2, "reader", True, tuple(Frame(n, f, ln) for f, n, ln in
                                                   [READER_LINE, *THREAD_RUN]), owns_gil=True)
    reading = classify([producers()[0], reader], gpu_busy=False,
                       source_line=lines(train="batch = batches.get()",
                                         read_batches="raw = shard.read(CHUNK)"))
    assert reading.phase == "data_wait" and reading.thread is reader, reading
    assert "reading a file or socket" in reading.reason
    assert stack_rules.PYTHON_ON_CPU not in reading.reason


# A Manager().Queue()'s get, as py-spy dumps it (Python 3.11): the proxy's method is made with
# exec, in <string>, above BaseProxy._callmethod, which waits for the manager's answer.
PROXY_GET = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._recv", 395),
             (f"{STDLIB}/multiprocessing/connection.py", "Connection._recv_bytes", 430),
             (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.recv", 250),
             (f"{STDLIB}/multiprocessing/managers.py", "BaseProxy._callmethod", 822),
             ("<string>", "get", 2),
             ("/home/me/worker.py", "main", 44)]


def test_a_worker_in_a_manager_queues_get_waits_for_its_next_job_on_its_own_line():
    """It read 'waiting in a multiprocessing pipe' at <string>:2, and the idle rule offered a
    worker waiting for jobs the SIGTERM. Now: idle, waiting for its next job (the rules treat
    it as a queue consumer), at the user's line."""
    signals = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.01, tree_cpu=0.02)
    found = classify(threads(PROXY_GET), gpu_busy=False, source_line=no_source,
                     signals=signals)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "manager's queue" in found.reason
    assert found.frame == Frame("main", "/home/me/worker.py", 44)
    # its child processes on a CPU meanwhile (workers that compute what it takes): data wait
    feeding = dataclasses.replace(signals, tree_cpu=1.6)
    fed = classify(threads(PROXY_GET), gpu_busy=False, source_line=no_source, signals=feeding)
    assert fed.phase == "data_wait" and "child processes" in fed.reason, fed
    # a proxied lock's acquire is no job
    acquire = [*PROXY_GET[:4], ("<string>", "acquire", 2), PROXY_GET[-1]]
    locked = classify(threads(acquire), gpu_busy=False, source_line=no_source, signals=signals)
    assert not locked.reason.startswith(stack_rules.JOB_WAIT), locked


# A multiprocessing.Queue's get (Python 3.11): a pipe's read inside multiprocessing.
MP_QUEUE_GET = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._recv", 395),
                (f"{STDLIB}/multiprocessing/connection.py", "Connection._recv_bytes", 430),
                (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.recv_bytes", 216),
                (f"{STDLIB}/multiprocessing/queues.py", "Queue.get", 103),
                (USER, "train", 61)]


def test_a_loop_in_a_multiprocessing_queues_get_while_its_decoder_processes_run_waits_for_data():
    """Decoder processes put batches on a multiprocessing.Queue; the loop waits in its get, a
    pipe's read. It read 'waiting in a multiprocessing pipe' (idle), and with its GPU 1% busy
    idle_gpu_held offered the SIGTERM and host_idle the host's stop, its children at 100% CPU.
    Waiting on multiprocessing while its children run is waiting for their data."""
    decoding = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.02, tree_cpu=1.02)
    found = classify(threads(MP_QUEUE_GET), gpu_busy=False, source_line=no_source,
                     signals=decoding)
    assert found.phase == "data_wait", found
    assert "child processes" in found.reason and "100% of a core" in found.reason, found.reason
    assert found.frame == Frame("train", USER, 61)
    # a loaded host gives a busy decoder a sliver of a core: runnable at the last tick, at work
    loaded = dataclasses.replace(decoding, tree_cpu=0.06, children_running=1)
    assert classify(threads(MP_QUEUE_GET), gpu_busy=False, source_line=no_source,
                    signals=loaded).phase == "data_wait"
    # its children asleep (or not measured): it waits for nothing, idle as before
    for signals in (dataclasses.replace(decoding, tree_cpu=0.05), None):
        assert classify(threads(MP_QUEUE_GET), gpu_busy=False, source_line=no_source,
                        signals=signals).phase == "idle", signals
    # its GPU busy meanwhile (its work another thread's): compute
    assert classify(threads(MP_QUEUE_GET), gpu_busy=False, source_line=no_source,
                    signals=decoding, busy_elsewhere=True).phase == "compute"


def test_a_loop_on_a_multiprocessing_queue_has_its_children_dumped_but_a_job_worker_not():
    """Its decoder processes' stacks show the line they spend their time on, which the
    prefetch advice names: they are dumped with it, as DataLoader workers are. A worker on a
    Manager().Queue() waits for its next job: its child is the manager, no worker of it."""
    assert waits_on_data_queue(threads(MP_QUEUE_GET))
    assert not waits_on_data_queue(threads(PROXY_GET))

# tests/daemon/workloads/executor_fed.py as py-spy dumps it (Python 3.11): a loop taking the
# batches a concurrent.futures pool makes, and how it takes them (--take).
FED = "/home/me/executor_fed.py"
FUTURES = f"{STDLIB}/concurrent/futures/_base.py"
CONDITION_WAIT = (f"{STDLIB}/threading.py", "Condition.wait", 327)
EVENT_WAIT = (f"{STDLIB}/threading.py", "Event.wait", 629)
FED_MAIN = [(FED, "main", 79), (FED, "<module>", 86)]
FUTURE_WAITS = {
    "result": [CONDITION_WAIT, (FUTURES, "Future.result", 451), (FED, "batches", 50), *FED_MAIN],
    "map": [CONDITION_WAIT, (FUTURES, "Future.result", 451),
            (FUTURES, "_result_or_cancel", 317),
            (FUTURES, "Executor.map.<locals>.result_iterator", 619),
            (f"{STDLIB}/concurrent/futures/process.py", "_chain_from_iterable_of_lists", 620),
            (FED, "batches", 46), *FED_MAIN],
    "as_completed": [CONDITION_WAIT, EVENT_WAIT, (FUTURES, "as_completed", 243),
                     (FED, "batches", 57), *FED_MAIN],
    "wait": [CONDITION_WAIT, EVENT_WAIT, (FUTURES, "wait", 305), (FED, "batches", 60),
             *FED_MAIN],
}
# A ProcessPoolExecutor's threads in its owner's process: neither has a user frame.
PROCESS_POOL_THREADS = [
    ([(f"{STDLIB}/selectors.py", "_PollLikeSelector.select", 415),
      (f"{STDLIB}/multiprocessing/connection.py", "wait", 947),
      (f"{STDLIB}/concurrent/futures/process.py",
       "_ExecutorManagerThread.wait_result_broken_or_wakeup", 417),
      (f"{STDLIB}/concurrent/futures/process.py", "_ExecutorManagerThread.run", 344),
      *THREAD_RUN], False),
    ([CONDITION_WAIT, (f"{STDLIB}/multiprocessing/queues.py", "Queue._feed", 231), *THREAD_RUN],
     False)]
# its two worker processes making batches: 1.9 cores between them, the loop's own 2%
POOL_AT_WORK = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.02, tree_cpu=1.92,
                           children_running=2)


def test_a_loop_waiting_on_its_process_pool_executors_results_waits_for_its_worker_processes():
    """A loop that submits batch-making to a ProcessPoolExecutor waits for each batch in
    Condition.wait under Future.result (or map's iterator, as_completed, wait): no
    multiprocessing frame, and the pool's threads have no user frame. It read 'waiting in
    Condition.wait' (idle), and idle_gpu_held could offer the SIGTERM to a job whose workers
    ran at 60-67% CPU. Beside a ProcessPoolExecutor's thread, with its children at work: data
    wait, worker processes feed it (the advice offers more of them, not threads)."""
    for take, main in FUTURE_WAITS.items():
        dump = threads(main, *PROCESS_POOL_THREADS)
        found = classify(dump, gpu_busy=False, source_line=no_source, signals=POOL_AT_WORK)
        assert found.phase == "data_wait", (take, found)
        assert found.reason.endswith(stack_rules.WORKER_PROCESSES_FEED_IT), found.reason
        assert "ProcessPoolExecutor" in found.reason, found.reason
        assert found.frame is not None and found.frame.name == "batches", found
        assert found.thread is None  # the line is the loop's: the pool's threads have none
        # its worker processes are dumped with it: the advice names their line
        assert waits_on_data_queue(dump), take
    # it names what the loop called: map's iterator, not the Future.result inside it
    mapped = classify(threads(FUTURE_WAITS["map"], *PROCESS_POOL_THREADS), gpu_busy=False,
                      source_line=no_source, signals=POOL_AT_WORK)
    assert "(_base.py:619 Executor.map.<locals>.result_iterator)" in mapped.reason, mapped
    # a loaded host gives a busy worker a sliver of a core: runnable at the last tick, at work
    loaded = dataclasses.replace(POOL_AT_WORK, tree_cpu=0.06, children_running=1)
    assert classify(threads(FUTURE_WAITS["result"], *PROCESS_POOL_THREADS), gpu_busy=False,
                    source_line=no_source, signals=loaded).phase == "data_wait"
    # its GPU busy meanwhile (its work another thread's): compute, as before
    assert classify(threads(FUTURE_WAITS["result"], *PROCESS_POOL_THREADS), gpu_busy=False,
                    source_line=no_source, signals=POOL_AT_WORK,
                    busy_elsewhere=True).phase == "compute"


# Probe 147's offload_train.py: a thread of its pool running Adam over a shard in numpy (the GIL
# released), while the loop waits for it in `f.result()`.
CPU_ADAM = [("/work/probe147/progs/offload_train.py", "adam", 20),
            (f"{STDLIB}/concurrent/futures/thread.py", "_WorkItem.run", 58),
            (f"{STDLIB}/concurrent/futures/thread.py", "_worker", 83), *THREAD_RUN]


def test_threads_running_the_optimizer_step_are_not_the_loops_input_nor_idle():
    """Probe 147 M3b: any working thread counted as work on the loop's input, so a loop waiting
    for its cpu_adam threads read data_wait ("works on its input") and got a prefetch patch.
    They update the parameters after the step: host compute of the step (host_preprocess,
    named so), never idle. A thread that works on input beside them keeps the data wait."""
    found = classify(threads(FUTURE_WAITS["result"], (CPU_ADAM, True), (CPU_ADAM, True)),
                     gpu_busy=False, source_line=no_source)
    assert found.phase == "host_preprocess", found
    assert stack_rules.RUNS_OPTIMIZER_STEP in found.reason, found.reason
    assert stack_rules.WORKS_ON_INPUT not in found.reason, found.reason
    assert found.frame == Frame("adam", "/work/probe147/progs/offload_train.py", 20)
    assert found.thread is not None and found.thread.thread_name == "worker-2"
    # a reader beside them: its input, as before
    fed = classify(threads(FUTURE_WAITS["result"], (CPU_ADAM, True), ([READER_LINE, *THREAD_RUN],
                                                                      True)),
                   gpu_busy=False, source_line=no_source)
    assert fed.phase == "data_wait" and fed.thread is not None, fed
    assert fed.thread.thread_name == "worker-3", fed
    # the optimizer threads between steps (blocked): nothing works, a wait as before
    assert classify(threads(FUTURE_WAITS["result"], (CPU_ADAM, False)), gpu_busy=False,
                    source_line=no_source).phase == "idle"
    # a thread in torch.optim's Adam (CPU tensors) is one too; a thread named `step` is not
    torch_adam = [(f"{SITE}/torch/optim/adam.py", "_single_tensor_adam", 412),
                  (f"{SITE}/torch/optim/adam.py", "Adam.step", 223),
                  ("/home/me/offload.py", "update", 12), *THREAD_RUN]
    assert classify(threads(FUTURE_WAITS["result"], (torch_adam, True)), gpu_busy=False,
                    source_line=no_source).phase == "host_preprocess"
    step = [("/home/me/train.py", "step", 12), *THREAD_RUN]
    assert classify(threads(FUTURE_WAITS["result"], (step, True)), gpu_busy=False,
                    source_line=no_source).phase == "data_wait"


def test_a_future_that_no_pool_works_on_stays_a_wait():
    """A server waiting on a future a request will complete, a job waiting on a remote call:
    nothing of the process makes what it waits for, and it stays what it was (idle)."""
    for take, main in FUTURE_WAITS.items():
        # no pool at all, though a child of it runs (a helper, a compressor)
        alone = classify(threads(main), gpu_busy=False, source_line=no_source,
                         signals=POOL_AT_WORK)
        assert alone.phase == "idle" and alone.reason.startswith("waiting in Condition.wait"), \
            (take, alone)
        assert not waits_on_data_queue(threads(main))
        # a ProcessPoolExecutor whose workers sleep (or were not measured): not its results
        for signals in (dataclasses.replace(POOL_AT_WORK, tree_cpu=0.03, children_running=0),
                        None):
            found = classify(threads(main, *PROCESS_POOL_THREADS), gpu_busy=False,
                             source_line=no_source, signals=signals)
            assert found.phase == "idle", (take, signals, found)
    # a thread pool's thread on a bare socket (a remote call): no input work, as before
    remote = [(f"{STDLIB}/socket.py", "socket.recv_into", 706),
              ("/home/me/client.py", "call", 31),
              (f"{STDLIB}/concurrent/futures/thread.py", "_WorkItem.run", 58),
              (f"{STDLIB}/concurrent/futures/thread.py", "_worker", 83), *THREAD_RUN]
    assert classify(threads(FUTURE_WAITS["result"], (remote, False)), gpu_busy=False,
                    source_line=no_source).phase == "idle"


# A ThreadPoolExecutor's thread running the loop's make_batch in Python (executor_fed.py
# --pool thread), and one between tasks (its get is a SimpleQueue's, C: no frame of its own).
THREAD_POOL_BATCH = [(FED, "make_batch.<locals>.<listcomp>.<listcomp>", 38),
                     (FED, "make_batch.<locals>.<listcomp>", 38), (FED, "make_batch", 38),
                     (f"{STDLIB}/concurrent/futures/thread.py", "_WorkItem.run", 58),
                     (f"{STDLIB}/concurrent/futures/thread.py", "_worker", 83), *THREAD_RUN]
THREAD_POOL_IDLE = [(f"{STDLIB}/concurrent/futures/thread.py", "_worker", 81), *THREAD_RUN]


def test_a_loop_on_its_thread_pools_futures_waits_for_the_thread_that_makes_its_batch():
    """The pool's threads run the user's function: _fed_by finds the one at work (a pin: this
    held before the ProcessPoolExecutor's rule)."""
    for take, main in FUTURE_WAITS.items():
        dump = threads(main, (THREAD_POOL_IDLE, False), (THREAD_POOL_BATCH, True))
        found = classify(dump, gpu_busy=False, source_line=no_source)
        assert found.phase == "data_wait", (take, found)
        assert found.frame == Frame("make_batch.<locals>.<listcomp>.<listcomp>", FED, 38)
        assert found.thread is dump[2]
        # all its threads between tasks: nothing made, nothing to wait for
        assert classify(threads(main, (THREAD_POOL_IDLE, False)), gpu_busy=False,
                        source_line=no_source).phase == "idle"


# A multiprocessing Pool's worker process (forked: below its own frames, its parent's copy
# of the frames that made the Pool), as py-spy dumps it (Python 3.11): between tasks, and
# running the user's function under Pool.map.
_POOL = f"{STDLIB}/multiprocessing/pool.py"
FORKED = [(f"{STDLIB}/multiprocessing/process.py", "BaseProcess.run", 108),
          (f"{STDLIB}/multiprocessing/process.py", "BaseProcess._bootstrap", 314),
          (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen._launch", 71),
          (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.__init__", 19),
          (f"{STDLIB}/multiprocessing/context.py", "ForkProcess._Popen", 281),
          (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.start", 121)]
MADE_THE_POOL = [*FORKED, (_POOL, "Pool._repopulate_pool_static", 329),
                 (_POOL, "Pool._repopulate_pool", 306), (_POOL, "Pool.__init__", 215),
                 (f"{STDLIB}/multiprocessing/context.py", "BaseContext.Pool", 119),
                 ("/home/me/pool_map.py", "<module>", 8)]
PIPE_READ = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._recv", 395),
             (f"{STDLIB}/multiprocessing/connection.py", "Connection._recv_bytes", 430),
             (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.recv_bytes", 216)]
POOL_WORKER_BETWEEN_TASKS = [*PIPE_READ, (f"{STDLIB}/multiprocessing/queues.py",
                                          "SimpleQueue.get", 365),
                             (_POOL, "worker", 114), *MADE_THE_POOL]
POOL_WORKER_DECODING = [("/home/me/pool_map.py", "decode", 4), (_POOL, "mapstar", 48),
                        (_POOL, "worker", 125), *MADE_THE_POOL]
# ... and a ProcessPoolExecutor's, between tasks and making a batch
_PPE = f"{STDLIB}/concurrent/futures/process.py"
MADE_THE_EXECUTOR = [*FORKED, (_PPE, "ProcessPoolExecutor._spawn_process", 785),
                     (_PPE, "ProcessPoolExecutor._launch_processes", 775),
                     (_PPE, "ProcessPoolExecutor._start_executor_manager_thread", 748),
                     (_PPE, "ProcessPoolExecutor.submit", 809), (FED, "batches", 50),
                     *FED_MAIN]
EXECUTOR_WORKER_BETWEEN_TASKS = [*PIPE_READ, (f"{STDLIB}/multiprocessing/queues.py",
                                              "Queue.get", 103),
                                 (_PPE, "_process_worker", 249), *MADE_THE_EXECUTOR]
EXECUTOR_WORKER_MAKING = [*THREAD_POOL_BATCH[:3], (_PPE, "_process_chunk.<locals>.<listcomp>", 210),
                          (_PPE, "_process_chunk", 210), (_PPE, "_process_worker", 261),
                          *MADE_THE_EXECUTOR]
# the Pool's owner in Pool.map
POOL_MAP = [CONDITION_WAIT, EVENT_WAIT, (_POOL, "ApplyResult.wait", 765),
            (_POOL, "ApplyResult.get", 768), (_POOL, "Pool.map", 367),
            ("/home/me/pool_map.py", "<module>", 10)]


def test_a_pool_worker_waits_for_its_next_task_and_runs_what_its_function_does():
    """The Pool rule matched inside the Pool's own workers (pool.py's `worker`), so a worker
    read data wait, waiting for its next task or decoding alike. A worker between tasks waits
    for its next job from its pool's queue (a queue consumer: never a process to stop, no
    input to prefetch); one running the user's function is what that function does. The
    Pool's owner waiting in map or imap still waits for data."""
    quiet = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0)
    for between, queue in ((POOL_WORKER_BETWEEN_TASKS, "multiprocessing Pool's task queue"),
                           (EXECUTOR_WORKER_BETWEEN_TASKS, "ProcessPoolExecutor's call queue")):
        for signals in (quiet, None):
            found = classify(threads(between), gpu_busy=False, source_line=no_source,
                             signals=signals)
            assert found.phase == "idle", found
            assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from its {queue}"), found
        assert not waits_on_data_queue(threads(between))
    for making in (POOL_WORKER_DECODING, EXECUTOR_WORKER_MAKING):
        dump = [ThreadStack(1, "MainThread", True, tuple(Frame(n, f, ln) for f, n, ln in making),
                            owns_gil=True)]
        found = classify(dump, gpu_busy=False, source_line=no_source)
        assert found.phase == "unknown", found  # host code running: what its function does
        assert found.frame == Frame(making[0][1], making[0][0], making[0][2])
        assert classify(dump, gpu_busy=False, source_line=no_source,
                        signals=dataclasses.replace(quiet, main_thread_cpu=0.98,
                                                    process_cpu=0.98)).phase == "host_preprocess"
    found = classify(threads(POOL_MAP), gpu_busy=False, source_line=no_source)
    assert found.phase == "data_wait" and "multiprocessing Pool" in found.reason, found
    assert waits_on_data_queue(threads(POOL_MAP))


def test_a_worker_blocked_on_a_socket_nothing_came_to_waits_for_its_next_job():
    """A render worker blocked in sock.recv between jobs read 'reading a file or socket'
    (data wait), and dataloader_starvation then offered read-ahead worth 94% of its burn. A recv
    brings bytes no /proc counter shows, but a stream wakes the thread at every packet: a main
    thread that slept through the last tick had nothing come to it."""
    SLEPT = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    main = [("/home/me/render.py", "recv_exact", 21), ("/home/me/render.py", "next_job", 29),
            ("/home/me/render.py", "main", 44)]
    recv = lines(recv_exact="chunk = sock.recv(size - len(buf))")
    found = classify(threads(main), gpu_busy=False, source_line=recv, signals=SLEPT)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "sock.recv(size - len(buf))" in found.reason
    assert found.frame == Frame("recv_exact", "/home/me/render.py", 21)
    # woken (bytes came), not measured, or a child computing what it sends: data wait
    for signals in (dataclasses.replace(SLEPT, main_thread_woke=True),
                    dataclasses.replace(SLEPT, main_thread_woke=None),
                    dataclasses.replace(SLEPT, tree_cpu=0.9), None):
        assert classify(threads(main), gpu_busy=False, source_line=recv,
                        signals=signals).phase == "data_wait", signals
    # the same through a socket file (pickle.load(sock.makefile("rb"))): socket.py's frames
    stream = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
              ("/home/me/feed.py", "receive_batch", 25), ("/home/me/feed.py", "main", 38)]
    assert classify(threads(stream), gpu_busy=False, source_line=no_source,
                    signals=SLEPT).phase == "idle"
    assert classify(threads(stream), gpu_busy=False, source_line=no_source,
                    signals=dataclasses.replace(SLEPT, main_thread_woke=True)
                    ).phase == "data_wait"
    # a client library's read (an HTTP download): input, whatever the thread's wakeups
    download = [stream[0], (f"{STDLIB}/http/client.py", "HTTPResponse.read", 466), *stream[1:]]
    assert classify(threads(download), gpu_busy=False, source_line=no_source,
                    signals=SLEPT).phase == "data_wait"
    # a file read on the line is input too
    assert classify(threads(main), gpu_busy=False, signals=SLEPT,
                    source_line=lines(recv_exact="chunk = shard.read(size)")).phase == "data_wait"


def test_a_rank_blocked_on_a_socket_to_its_own_job_waits_for_its_peer():
    """Probe 143 F2: a rank of a hand-written all-reduce blocked in conn.recv for its sibling
    rank (which preprocesses on its CPU) read as a worker waiting for its next job (idle,
    JOB_WAIT: batch_inference, 'scale to zero'). Where its TCP connections all go to its own
    job's GPU processes (HostSignals.job_peers_only, from its kind), it waits for its peer:
    comm, woken by the peer's bytes or not; a client library's read stays input."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False, job_peers_only=True)
    main = [("/home/me/ddp.py", "recv_exactly", 40), ("/home/me/ddp.py", "allreduce", 49),
            ("/home/me/ddp.py", "rank", 77)]
    recv = lines(recv_exactly="chunk = conn.recv(n - len(got))")
    for signals in (slept, dataclasses.replace(slept, main_thread_woke=True),
                    dataclasses.replace(slept, main_thread_woke=None)):
        found = classify(threads(main), gpu_busy=False, source_line=recv, signals=signals)
        assert found.phase == "comm", (signals, found)
        assert found.reason.startswith(stack_rules.PEER_WAIT), found.reason
        assert "conn.recv(n - len(got))" in found.reason
        assert found.frame == Frame("recv_exactly", "/home/me/ddp.py", 40)
    # the same read with a connection elsewhere too (a broker, a job server): a job wait
    found = classify(threads(main), gpu_busy=False, source_line=recv,
                     signals=dataclasses.replace(slept, job_peers_only=False))
    assert found.reason.startswith(stack_rules.JOB_WAIT), found
    # through socket.py's frames (a socket file)
    stream = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
              ("/home/me/ddp.py", "receive_grads", 25), ("/home/me/ddp.py", "main", 38)]
    assert classify(threads(stream), gpu_busy=False, source_line=no_source,
                    signals=slept).phase == "comm"
    download = [stream[0], (f"{STDLIB}/http/client.py", "HTTPResponse.read", 466), *stream[1:]]
    assert classify(threads(download), gpu_busy=False, source_line=no_source,
                    signals=slept).phase == "data_wait"
    # the GPU busy meanwhile: compute, as ever
    assert classify(threads(main), gpu_busy=True, source_line=recv,
                    signals=slept).phase == "compute"


def test_a_main_thread_joining_threads_that_wait_on_locks_waits_on_a_lock():
    """Probe 143 F5: two threads deadlocked on two locks (`with stats_lock:` inside `with
    model_lock:`, and the other way round), the main thread in Thread.join: the reason said
    only 'waiting in Thread.join' (idle_gpu_held's SIGTERM), where a main thread waiting on a
    lock itself gets a look first. The main thread waits for threads that wait on locks: a
    lock wait, naming those threads' lines, and a deadlock where no other thread is left."""
    join = [(f"{STDLIB}/threading.py", "Thread._wait_for_tstate_lock", 1132),
            (f"{STDLIB}/threading.py", "Thread.join", 1112), ("/home/me/train.py", "main", 25)]
    step = [("/home/me/train.py", "train_steps", 12), (f"{STDLIB}/threading.py", "Thread.run", 982)]
    log = [("/home/me/train.py", "log_stats", 18), (f"{STDLIB}/threading.py", "Thread.run", 982)]
    source = lines(train_steps="        with stats_lock:", log_stats="        with model_lock:",
                   main="    t1.join(); t2.join()")
    found = classify(threads(join, (step, False), (log, False)), gpu_busy=False,
                     source_line=source, signals=signals(tree_cpu=0.0, main_thread_woke=False))
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.LOCK_WAIT), found.reason
    assert "Thread.join" in found.reason and "train.py:12 train_steps" in found.reason
    assert "train.py:18 log_stats" in found.reason and "deadlock?" in found.reason
    assert found.frame == Frame("train_steps", "/home/me/train.py", 12)
    assert found.thread is not None and found.thread.thread_id == 2
    # one of them works (or runs): no lock wait said, whatever the other does
    assert not classify(threads(join, (step, True), (log, False)), gpu_busy=False,
                        source_line=source).reason.startswith(stack_rules.LOCK_WAIT)
    # one waits on a lock, the other sleeps: a lock wait, no deadlock said
    nap = lines(train_steps="        with stats_lock:", log_stats="        time.sleep(60)")
    found = classify(threads(join, (step, False), (log, False)), gpu_busy=False,
                     source_line=nap)
    assert found.reason.startswith(stack_rules.LOCK_WAIT) and "deadlock" not in found.reason
    # no thread on a lock (a `with` that calls, an open): the join as before
    calls = lines(train_steps="        with open(path) as f:", log_stats="        time.sleep(60)")
    found = classify(threads(join, (step, False), (log, False)), gpu_busy=False,
                     source_line=calls)
    assert found.reason.startswith("waiting in Thread.join"), found.reason
    # a main thread blocked at `with lock:` itself (C: no frame below) waits on a lock
    found = classify(threads([("/home/me/train.py", "main", 30)]), gpu_busy=False,
                     source_line=lines(main="    with model_lock:"))
    assert found.phase == "idle" and found.reason.startswith(stack_rules.LOCK_WAIT), found


def test_an_interactive_prompts_frameless_main_thread_waits_at_its_prompt():
    """Probe 143 F4: a python REPL at its prompt reads its next line in C (PyOS_Readline): py-spy
    shows its main thread idle with no Python frame, which read `unknown`. Where its kind says it
    is an interactive prompt (HostSignals.interactive_prompt), it waits at its prompt: idle.
    Not where it runs (py-spy: active), nor any other frameless main thread."""
    prompt = [ThreadStack(1, "MainThread", False, ())]
    at = signals(interactive_prompt=True, tree_cpu=0.0, main_thread_woke=False)
    found = classify(prompt, gpu_busy=False, signals=at)
    assert found.phase == "idle" and found.reason.startswith(stack_rules.PROMPT_WAIT), found
    assert found.frame is None
    running = [ThreadStack(1, "MainThread", True, ())]
    assert classify(running, gpu_busy=False, signals=at).phase == "unknown"
    assert classify(prompt, gpu_busy=False, signals=signals()).phase == "unknown"
    assert classify(prompt, gpu_busy=False).phase == "unknown"
    assert classify(prompt, gpu_busy=True, signals=at).phase == "compute"


# A redis-py 8 worker in BLPOP on an empty list, as py-spy dumps it (Python 3.11): the
# command's method above redis-py's socket reads, which leave no socket.py frame (recv_into is C).
SITE_PACKAGES = "/srv/venv/lib/python3.11/site-packages"
REDIS_BLPOP = [(f"{SITE_PACKAGES}/redis/_parsers/socket.py", "SocketBuffer._read_from_socket", 98),
               (f"{SITE_PACKAGES}/redis/_parsers/socket.py", "SocketBuffer.readline", 177),
               (f"{SITE_PACKAGES}/redis/_parsers/resp3.py", "_RESP3Parser._read_response", 68),
               (f"{SITE_PACKAGES}/redis/_parsers/resp3.py", "_RESP3Parser.read_response", 42),
               (f"{SITE_PACKAGES}/redis/connection.py", "AbstractConnection.read_response", 1761),
               (f"{SITE_PACKAGES}/redis/client.py", "Redis.parse_response", 1027),
               (f"{SITE_PACKAGES}/redis/client.py", "Redis._send_command_parse_response", 909),
               (f"{SITE_PACKAGES}/redis/client.py", "Redis._execute_command.<locals>.<lambda>", 980),
               (f"{SITE_PACKAGES}/redis/retry.py", "Retry.call_with_retry", 142),
               (f"{SITE_PACKAGES}/redis/client.py", "Redis._execute_command", 979),
               (f"{SITE_PACKAGES}/redis/client.py", "Redis.execute_command", 957),
               (f"{SITE_PACKAGES}/redis/commands/core.py", "ListCommands.blpop", 5121),
               ("/home/me/worker.py", "main", 43)]


def test_a_worker_in_a_redis_blpop_waits_for_its_next_job_on_its_own_line():
    """It read 'main thread blocked with the GPU idle' (idle), and idle_gpu_held offered the
    SIGTERM to a worker waiting on its redis job queue. A blocking pop is a wait for the next
    job, whatever the signals; a redis read that is no blocking pop (a GET of a sample) is not."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    for signals in (slept, dataclasses.replace(slept, main_thread_woke=True), None):
        found = classify(threads(REDIS_BLPOP), gpu_busy=False, source_line=no_source,
                         signals=signals)
        assert found.phase == "idle", (signals, found)
        assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
        assert "redis list (BLPOP)" in found.reason, found.reason
        assert found.frame == Frame("main", "/home/me/worker.py", 43)
    # the pops of redis-py 3 (redis/client.py) and of a sorted set
    for frame in ((f"{SITE_PACKAGES}/redis/client.py", "Redis.brpop", 1650),
                  (f"{SITE_PACKAGES}/redis/commands/core.py", "SortedSetCommands.bzpopmin", 4090)):
        found = classify(threads([*REDIS_BLPOP[:-2], frame, REDIS_BLPOP[-1]]), gpu_busy=False,
                         source_line=no_source, signals=slept)
        assert found.reason.startswith(stack_rules.JOB_WAIT), (frame, found)
    # a GET (a loop reading its samples from redis) is no job's wait
    get = [*REDIS_BLPOP[:-2], (f"{SITE_PACKAGES}/redis/commands/core.py", "BasicKeyCommands.get",
                               1829), REDIS_BLPOP[-1]]
    found = classify(threads(get), gpu_busy=False, source_line=no_source, signals=slept)
    assert not found.reason.startswith(stack_rules.JOB_WAIT), found
    # its GPU busy: compute
    assert classify(threads(REDIS_BLPOP), gpu_busy=True, source_line=no_source,
                    signals=slept).phase == "compute"


# A training loop reading its batch's samples from redis (tests/daemon/workloads/redis_fed_loop.py,
# 512-KB values), as py-spy dumps it (redis-py 8, Python 3.11, no hiredis): in redis-py's response
# parsing under a GET, an MGET and a pipeline's execute, and sending a GET.
REDIS = f"{SITE_PACKAGES}/redis"
REDIS_FED = "/home/me/redis_fed_loop.py"
REDIS_COMMAND = [(f"{REDIS}/connection.py", "AbstractConnection.read_response", 1761),
                 (f"{REDIS}/client.py", "Redis.parse_response", 1027),
                 (f"{REDIS}/client.py", "Redis._send_command_parse_response", 909),
                 (f"{REDIS}/client.py", "Redis._execute_command.<locals>.<lambda>", 980),
                 (f"{REDIS}/retry.py", "Retry.call_with_retry", 142),
                 (f"{REDIS}/client.py", "Redis._execute_command", 979),
                 (f"{REDIS}/client.py", "Redis.execute_command", 957)]
REDIS_GET = [(f"{REDIS}/_parsers/socket.py", "SocketBuffer.read", 166),
             (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser._read_response", 108),
             (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser.read_response", 42), *REDIS_COMMAND,
             (f"{REDIS}/commands/core.py", "BasicKeyCommands.get", 3451),
             (REDIS_FED, "main.<locals>.<listcomp>", 43), (REDIS_FED, "main", 43), (REDIS_FED, "<module>", 56)]
REDIS_SENDING_GET = [(f"{REDIS}/connection.py", "AbstractConnection.send_packed_command", 1691),
                     (f"{REDIS}/connection.py", "AbstractConnection.send_command", 1723),
                     (f"{REDIS}/client.py", "Redis._send_command_parse_response", 908),
                     *REDIS_COMMAND[3:], *REDIS_GET[-5:]]
REDIS_MGET = [(f"{REDIS}/_parsers/socket.py", "SocketBuffer._read_from_socket", 98),
              (f"{REDIS}/_parsers/socket.py", "SocketBuffer.read", 165),
              (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser._read_response", 108),
              (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser._read_response.<locals>.<listcomp>", 117),
              (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser._read_response", 116),
              (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser.read_response", 42), *REDIS_COMMAND,
              (f"{REDIS}/commands/core.py", "BasicKeyCommands.mget", 4036),
              (REDIS_FED, "main", 45), (REDIS_FED, "<module>", 56)]
REDIS_PIPELINE = [(f"{REDIS}/_parsers/socket.py", "SocketBuffer._purge", 242),
                  (f"{REDIS}/_parsers/socket.py", "SocketBuffer.purge", 215),
                  (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser.read_response", 54),
                  REDIS_COMMAND[0], REDIS_COMMAND[1],
                  (f"{REDIS}/client.py", "Pipeline.parse_response", 2321),
                  (f"{REDIS}/client.py", "Pipeline._execute_pipeline", 2285),
                  (f"{REDIS}/client.py", "Pipeline.execute.<locals>.<lambda>", 2413),
                  (f"{REDIS}/retry.py", "Retry.call_with_retry", 142),
                  (f"{REDIS}/client.py", "Pipeline.execute", 2412),
                  (REDIS_FED, "main", 50), (REDIS_FED, "<module>", 56)]


@pytest.mark.parametrize("dump", [REDIS_GET, REDIS_SENDING_GET, REDIS_MGET, REDIS_PIPELINE],
                         ids=["get", "sending-get", "mget", "pipeline"])
def test_a_loop_reading_its_samples_from_redis_waits_for_data(dump):
    """It read 'main thread blocked with the GPU idle' (idle: idle_gpu_held's SIGTERM):
    redis-py's socket reads are C, no socket.py frame. A read through redis-py under any
    command that is no blocking pop reads input, whatever the signals (bytes keep coming)."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    for active in (False, True):
        for signals in (None, slept, dataclasses.replace(slept, main_thread_woke=True,
                                                         main_thread_cpu=0.9)):
            found = classify([ThreadStack(1, "MainThread", active, tuple(
                Frame(n, f, ln) for f, n, ln in dump))], gpu_busy=False,
                source_line=no_source, signals=signals)
            assert found.phase == "data_wait", (active, signals, found)
            assert found.reason.startswith("reading (redis)"), found.reason
            assert found.frame is not None and found.frame.filename == REDIS_FED, found
    # the blocking pop above the same reads stays the job's wait
    found = classify(threads(REDIS_BLPOP), gpu_busy=False, source_line=no_source)
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason


# A consumer of a redis stream waiting for new entries (XREAD / XREADGROUP with block=2000 on an
# empty stream), as py-spy dumps it (redis-py 8, Python 3.11).
CONSUMER = "/home/me/stream_consumer.py"
REDIS_XREAD = [*REDIS_BLPOP[:11], (f"{REDIS}/commands/core.py", "StreamCommands.xread", 8830),
               (CONSUMER, "<module>", 12)]
REDIS_XREADGROUP = [*REDIS_BLPOP[:11],
                    (f"{REDIS}/commands/core.py", "StreamCommands.xreadgroup", 8961),
                    (CONSUMER, "<module>", 14)]


def test_a_consumer_blocked_on_a_redis_stream_waits_for_its_next_job():
    """XREAD/XREADGROUP with block= waits in the server for new entries, as BLPOP does; the
    frame cannot say whether it blocks: the user's line can, or (where it does not) a main
    thread that slept through the tick. A stream read that says neither reads input."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    woke = dataclasses.replace(slept, main_thread_woke=True)
    blocking = lines(**{"<module>": 'got = r.xreadgroup("workers", "w1", {"events": ">"}, '
                                    "count=1, block=2000)"})
    for dump, command in ((REDIS_XREAD, "XREAD"), (REDIS_XREADGROUP, "XREADGROUP")):
        # block= on the line: the job's wait, whatever the signals
        for signals in (slept, woke, None):
            found = classify(threads(dump), gpu_busy=False, source_line=blocking,
                             signals=signals)
            assert found.phase == "idle", (signals, found)
            assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
            assert f"redis stream ({command} BLOCK" in found.reason, found.reason
            assert found.frame == Frame("<module>", CONSUMER, dump[-1][2])
        # the line unread: the job's wait where nothing came over the tick
        found = classify(threads(dump), gpu_busy=False, source_line=no_source, signals=slept)
        assert found.phase == "idle" and found.reason.startswith(stack_rules.JOB_WAIT), found
        assert "redis stream with no new entries" in found.reason, found.reason
        for signals in (woke, None):
            assert classify(threads(dump), gpu_busy=False, source_line=no_source,
                            signals=signals).phase == "data_wait", signals
        # no block= (block=None is no block either): reading what the stream holds
        for line in ('got = r.xread({"events": last}, count=64)',
                     'got = r.xread({"events": last}, count=64, block=None)'):
            found = classify(threads(dump), gpu_busy=False,
                             source_line=lines(**{"<module>": line}), signals=woke)
            assert found.phase == "data_wait" and "reading (redis)" in found.reason, found
    # block=0 blocks for ever; a variable is a wait too
    for line in ("r.xread(streams, block=0)", "r.xread(streams, block=self.block_ms)"):
        assert classify(threads(REDIS_XREAD), gpu_busy=False, signals=woke,
                        source_line=lines(**{"<module>": line})).phase == "idle", line


# A subscriber of a redis channel waiting for the next published message
# (tests/daemon/workloads/redis_pubsub_worker.py on a real redis-server, nothing published), as
# py-spy dumps it (redis-py 8.2, Python 3.11, no hiredis): iterating PubSub.listen(), polling
# PubSub.get_message(timeout=2.0), and calling PubSub.parse_response() itself.
SUBSCRIBER = "/home/me/redis_pubsub_worker.py"
PUBSUB_READ = [(f"{REDIS}/_parsers/socket.py", "SocketBuffer._read_from_socket", 98),
               (f"{REDIS}/_parsers/socket.py", "SocketBuffer.readline", 177),
               (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser._read_response", 68),
               (f"{REDIS}/_parsers/resp3.py", "_RESP3Parser.read_response", 42),
               (f"{REDIS}/connection.py", "AbstractConnection.read_response", 1761),
               (f"{REDIS}/client.py", "PubSub.parse_response.<locals>.try_read", 1520)]
PUBSUB_EXECUTE = [(f"{REDIS}/client.py", "PubSub._execute.<locals>.<lambda>", 1432),
                  (f"{REDIS}/retry.py", "Retry.call_with_retry", 142),
                  (f"{REDIS}/client.py", "PubSub._execute", 1431),
                  (f"{REDIS}/client.py", "PubSub.parse_response", 1532)]
SUBSCRIBER_MAIN = [(SUBSCRIBER, "main", 52), (SUBSCRIBER, "<module>", 61)]
PUBSUB_LISTEN = [*PUBSUB_READ, *PUBSUB_EXECUTE, (f"{REDIS}/client.py", "PubSub.listen", 1720),
                 (SUBSCRIBER, "messages", 26), *SUBSCRIBER_MAIN]
PUBSUB_GET_MESSAGE = [(f"{REDIS}/_parsers/socket.py", "SocketBuffer._read_from_socket", 98),
                      (f"{REDIS}/_parsers/socket.py", "SocketBuffer.can_read", 152),
                      (f"{REDIS}/_parsers/base.py", "_RESPBase.can_read", 217),
                      (f"{REDIS}/connection.py", "AbstractConnection.can_read", 1739),
                      (f"{REDIS}/client.py", "PubSub.parse_response.<locals>.try_read", 1509),
                      *PUBSUB_EXECUTE, (f"{REDIS}/client.py", "PubSub.get_message", 1751),
                      (SUBSCRIBER, "messages", 29), *SUBSCRIBER_MAIN]
PUBSUB_PARSE_RESPONSE = [*PUBSUB_READ, *PUBSUB_EXECUTE, (SUBSCRIBER, "messages", 31),
                         *SUBSCRIBER_MAIN]


def bare(dump: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """`dump` as py-spy names its frames on Pythons before 3.11: bare function names."""
    return [(file, name.split(".<locals>.")[-1].rsplit(".", 1)[-1], line)
            for file, name, line in dump]


@pytest.mark.parametrize("dump", [PUBSUB_LISTEN, PUBSUB_GET_MESSAGE, PUBSUB_PARSE_RESPONSE],
                         ids=["listen", "get_message", "parse_response"])
def test_a_redis_subscriber_waiting_for_a_message_waits_for_its_next_job(dump):
    """It read 'reading (redis)' (data wait: dataloader_starvation's prefetch advice) as a loop
    GETting its samples does: redis-py's reads are the same. Waiting for the next message
    published on its channel is a consumer's wait for its next job, whatever the signals, on
    Pythons before 3.11 too; a GET stays input there, and its GPU busy is compute."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    for frames in (dump, bare(dump)):
        for signals in (slept, dataclasses.replace(slept, main_thread_woke=True), None):
            found = classify(threads(frames), gpu_busy=False, source_line=no_source,
                             signals=signals)
            assert found.phase == "idle", (signals, found)
            assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
            assert "redis channel (PubSub" in found.reason, found.reason
            assert found.frame is not None and found.frame.filename == SUBSCRIBER, found
        assert classify(threads(frames), gpu_busy=True, source_line=no_source,
                        signals=slept).phase == "compute"
    # the bare names of a GET-fed loop (Redis.parse_response, no PubSub._execute): input still
    found = classify(threads(bare(REDIS_GET)), gpu_busy=False, source_line=no_source,
                     signals=slept)
    assert found.phase == "data_wait" and found.reason.startswith("reading (redis)"), found


# urllib.request's urlopen waiting for the job server's answer to a long poll, as py-spy dumps it
# (Python 3.11): http.client reading the status line.
LONG_POLL = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
             (f"{STDLIB}/http/client.py", "HTTPResponse._read_status", 286),
             (f"{STDLIB}/http/client.py", "HTTPResponse.begin", 325),
             (f"{STDLIB}/http/client.py", "HTTPConnection.getresponse", 1386),
             (f"{STDLIB}/urllib/request.py", "AbstractHTTPHandler.do_open", 1352),
             (f"{STDLIB}/urllib/request.py", "HTTPHandler.http_open", 1377),
             (f"{STDLIB}/urllib/request.py", "OpenerDirector._call_chain", 496),
             (f"{STDLIB}/urllib/request.py", "OpenerDirector._open", 536),
             (f"{STDLIB}/urllib/request.py", "OpenerDirector.open", 519),
             (f"{STDLIB}/urllib/request.py", "urlopen", 216),
             ("/home/me/worker.py", "next_job", 22), ("/home/me/worker.py", "main", 37)]


def test_a_worker_in_an_http_long_poll_nothing_answered_waits_for_its_next_job():
    """It read 'reading (socket)' (data wait: an HTTP client's read), and
    dataloader_starvation offered read-ahead for a worker whose job server held its request
    open. A request whose answer has not begun while its thread slept through the tick waits
    for its next job; the same request woken by bytes, or a body's read, is input."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    found = classify(threads(LONG_POLL), gpu_busy=False, source_line=no_source, signals=slept)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "HTTPResponse._read_status" in found.reason and "long poll" in found.reason
    assert found.frame == Frame("next_job", "/home/me/worker.py", 22)
    # bytes came (woken), not measured, or its children compute what it fetches: data wait
    for signals in (dataclasses.replace(slept, main_thread_woke=True),
                    dataclasses.replace(slept, main_thread_woke=None),
                    dataclasses.replace(slept, tree_cpu=0.9), None):
        assert classify(threads(LONG_POLL), gpu_busy=False, source_line=no_source,
                        signals=signals).phase == "data_wait", signals
    # the body's read (a shard's download), through urllib3 too: input, whatever the wakeups
    for body in ([(f"{STDLIB}/http/client.py", "HTTPResponse.read", 466), *LONG_POLL[9:]],
                 [(f"{STDLIB}/http/client.py", "HTTPResponse.readinto", 507),
                  (f"{SITE_PACKAGES}/urllib3/response.py", "HTTPResponse._fp_read", 908),
                  (f"{SITE_PACKAGES}/urllib3/response.py", "HTTPResponse.read", 980),
                  *LONG_POLL[10:]]):
        download = [LONG_POLL[0], *body]
        assert classify(threads(download), gpu_busy=False, source_line=no_source,
                        signals=slept).phase == "data_wait", download


# A worker polling a redis list (LPOP, then a sleep when it came back empty), as py-spy dumps it
# (Python 3.11, tests/daemon/workloads/redis_polling_worker.py): the sleep is C, the take over
# a socket too short for a dump to catch, so the stack is the user's line alone.
POLLING = [("/home/me/worker.py", "main", 37), ("/home/me/worker.py", "<module>", 45)]
POLLING_SOURCE = {30: "    dev = _gpu.attach()", 33: "    while True:",
                  34: "        raw = r.lpop(args.queue)",
                  35: "        if raw is None:",
                  36: "            # nothing queued: ask again in a moment",
                  37: "            time.sleep(args.sleep)", 38: "            continue",
                  39: "        job = json.loads(raw)"}


def by_line(source: dict[int, str]):
    return lambda frame: source.get(frame.line)


def test_a_worker_sleeping_between_non_blocking_pops_of_a_redis_list_waits_for_its_next_job():
    """It read 'sleeping or waiting' (idle), and idle_gpu_held offered the SIGTERM to a worker
    polling its redis queue. A sleep whose function takes from a redis queue without blocking
    (LPOP, RPOP, ZPOPMIN...), a few lines before or after it, waits for the next job; a sleep
    in a loop with no such take (a stalled job), or a take in another function, stays idle."""
    found = classify(threads(POLLING), gpu_busy=False, source_line=by_line(POLLING_SOURCE))
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "r.lpop(args.queue)" in found.reason and "line 34" in found.reason, found.reason
    assert found.frame == Frame("main", "/home/me/worker.py", 37)
    # the take after the sleep (a loop that sleeps first), an RPOP, a ZPOPMIN
    for take_at, take in ((38, "        job = r.rpop('jobs')"),
                          (33, "        item = queue.zpopmin('jobs', 1)")):
        source = {**POLLING_SOURCE, 34: "        raw = None", take_at: take}
        found = classify(threads(POLLING), gpu_busy=False, source_line=by_line(source))
        assert found.reason.startswith(stack_rules.JOB_WAIT), (take, found)
    # a stalled loop's sleep: no take, a GET, a list's pop, a take past the function's first
    # line or beyond POLL_LINES_LOOKED_AT: idle, as before
    for source in ({**POLLING_SOURCE, 34: "        raw = r.get(args.queue)"},
                   {**POLLING_SOURCE, 34: "        raw = pending.pop(0)"},
                   {**POLLING_SOURCE, 34: "def main():", 33: "    r.lpop('jobs')"},
                   {**{n: "        pass" for n in range(1, 37)},
                    37: "            time.sleep(args.sleep)",
                    37 - stack_rules.POLL_LINES_LOOKED_AT - 1: "        raw = r.lpop(q)"}):
        found = classify(threads(POLLING), gpu_busy=False, source_line=by_line(source))
        assert found.phase == "idle", (source, found)
        assert found.reason.startswith("sleeping or waiting"), (source, found)
    # a hostile line: bounded, and a take on a line that is no sleep is no job's wait
    hostile = {37: "time.sleep(1)" + " " * 4000, 36: "(" * 100_000 + ".lpop("}
    assert classify(threads(POLLING), gpu_busy=False,
                    source_line=by_line(hostile)).reason.startswith(stack_rules.JOB_WAIT)
    assert not classify(threads(POLLING), gpu_busy=False, source_line=by_line(
        {37: "x = r.lpop(q)", 36: "time.sleep(1)"})).reason.startswith(stack_rules.JOB_WAIT)


# A worker receiving from an AWS SQS queue with boto3, as py-spy dumps it (Python 3.11, botocore
# 1.44, tests/daemon/workloads/sqs_job_worker.py): a long poll (WaitTimeSeconds=20) waits for
# the answer's status line under urllib3 and botocore, whose frames do not name the operation.
SQS_RECEIVE = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
               (f"{STDLIB}/http/client.py", "HTTPResponse._read_status", 286),
               (f"{STDLIB}/http/client.py", "HTTPResponse.begin", 325),
               (f"{STDLIB}/http/client.py", "HTTPConnection.getresponse", 1386),
               (f"{SITE_PACKAGES}/urllib3/connection.py", "HTTPConnection.getresponse", 638),
               (f"{SITE_PACKAGES}/urllib3/connectionpool.py",
                "HTTPConnectionPool._make_request", 540),
               (f"{SITE_PACKAGES}/urllib3/connectionpool.py", "HTTPConnectionPool.urlopen", 793),
               (f"{SITE_PACKAGES}/botocore/httpsession.py", "URLLib3Session.send", 509),
               (f"{SITE_PACKAGES}/botocore/endpoint.py", "Endpoint._send", 385),
               (f"{SITE_PACKAGES}/botocore/client.py", "BaseClient._make_api_call", 1082),
               (f"{SITE_PACKAGES}/botocore/client.py",
                "ClientCreator._create_api_method.<locals>._api_call", 612),
               ("/home/me/worker.py", "main", 39), ("/home/me/worker.py", "<module>", 55)]
SQS_SOURCE = {39: "        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)",
              40: "        messages = got.get('Messages', [])", 41: "        if not messages:",
              42: "            if args.wait == 0:", 43: "                # short poll",
              44: "                time.sleep(args.sleep)  # nothing queued: ask again",
              45: "            continue"}


def test_a_worker_receiving_from_an_sqs_queue_waits_for_its_next_job():
    """A worker short-polling SQS (WaitTimeSeconds=0, a sleep when empty) read 'sleeping or
    waiting' (idle_gpu_held's SIGTERM) and, caught in its request, 'reading (socket)'. A
    receive under botocore's request waits for its next job whatever its socket brought (a
    long poll held, or a short poll's take), and so does a sleep near a receive; another
    botocore request (an S3 download), or a receive over no botocore frame, is input still."""
    woke = HostSignals(seconds=3.0, main_thread_cpu=0.1, process_cpu=0.1, tree_cpu=0.1,
                       main_thread_woke=True)
    for signals in (woke, None):
        found = classify(threads(SQS_RECEIVE), gpu_busy=False, source_line=by_line(SQS_SOURCE),
                         signals=signals)
        assert found.phase == "idle", found
        assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from an SQS queue"), found
        assert "sqs.receive_message(" in found.reason and "botocore" not in found.reason[:60]
        assert found.frame == Frame("main", "/home/me/worker.py", 39)
    resource = {39: "        for message in queue.receive_messages(WaitTimeSeconds=20):"}
    assert classify(threads(SQS_RECEIVE), gpu_busy=False, source_line=by_line(resource),
                    signals=woke).reason.startswith(stack_rules.JOB_WAIT)
    # an S3 GET's wait for its answer, a line that cannot be read, a receive beyond the 80
    # characters read of a hostile line, a receive of the user's own over urllib: data wait
    for frames, source in (
            (SQS_RECEIVE, {39: "        body = s3.get_object(Bucket=b, Key=k)['Body']"}),
            (SQS_RECEIVE, {}),
            (SQS_RECEIVE, {39: "x = (" + " " * 100_000 + ").receive_message("}),
            ([*LONG_POLL[:10], ("/home/me/worker.py", "main", 39)], SQS_SOURCE)):
        found = classify(threads(frames), gpu_busy=False, source_line=by_line(source),
                         signals=woke)
        assert found.phase == "data_wait", (source, found)
    # the short poll's sleep, the receive 5 lines above it
    found = classify(threads([("/home/me/worker.py", "main", 44)]), gpu_busy=False,
                     source_line=by_line(SQS_SOURCE))
    assert found.phase == "idle", found
    assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from an SQS queue it polls"), found
    assert "line 39" in found.reason, found.reason


# A worker watching an inbox folder (os.listdir every 2 s, a file run on the GPU), as py-spy 0.4.3
# dumps it between files (Python 3.11, tests/daemon/workloads/watch_folder_worker.py): its
# sleep's line alone, the listing too short for a dump to catch.
WATCHING = [("/srv/scans/watch.py", "watch", 34), ("/srv/scans/watch.py", "main", 60),
            ("/srv/scans/watch.py", "<module>", 64)]
WATCHING_SOURCE = {("watch", 30): "def watch(dev, args: argparse.Namespace) -> None:",
                   ("watch", 31): "    while True:",
                   ("watch", 32): "        for name in sorted(os.listdir(args.inbox)):",
                   ("watch", 33): "            process(dev, Path(args.inbox) / name, outbox)",
                   ("watch", 34): "        time.sleep(args.every)  # nothing new: look again",
                   ("main", 60): "        watch(dev, args)"}
# The corpus's await_trigger.py: a job that holds its GPU until a go-file appears.
AWAIT_TRIGGER = [("/srv/corpus/await_trigger.py", "wait_for_go", 16),
                 ("/srv/corpus/await_trigger.py", "main", 22),
                 ("/srv/corpus/await_trigger.py", "<module>", 26)]
AWAIT_TRIGGER_SOURCE = {("wait_for_go", 14): "def wait_for_go(flag: str) -> None:",
                        ("wait_for_go", 15): "    while not os.path.exists(flag):",
                        ("wait_for_go", 16): "        time.sleep(0.5)",
                        ("main", 20): "    with Device(gpu_index=GPU) as gpu:",
                        ("main", 21): "        gpu.alloc(22 << 30)",
                        ("main", 22): '        wait_for_go("/nonexistent/mlcost-corpus-go")'}


def by_frame(source: dict[tuple[str, int], str]):
    return lambda frame: source.get((frame.name, frame.line))


def test_a_worker_sleeping_between_looks_at_its_inbox_folder_waits_for_its_next_file():
    """A watch-folder worker between files read 'sleeping or waiting' (idle), and
    idle_gpu_held offered the SIGTERM. A sleep whose function (or its caller, the frame right
    outside it) lists a folder a few lines away (os.listdir, os.scandir, os.walk, a Path's
    iterdir or glob, glob.glob) waits for its next file; a wait for one path to appear (a
    go-flag: the corpus's await_trigger.py, a stalled loop's resume file) is no stream of jobs
    (test_a_sleep_in_a_loop_that_checks_for_a_path_waits_for_a_file)."""
    found = classify(threads(WATCHING), gpu_busy=False, source_line=by_frame(WATCHING_SOURCE))
    assert found.phase == "idle", found
    assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from a folder it polls"), found
    assert "os.listdir(args.inbox)" in found.reason and "line 32" in found.reason, found
    assert found.frame == Frame("watch", "/srv/scans/watch.py", 34)
    for listing in ("for entry in os.scandir(inbox):", "for scan in sorted(inbox.glob('*.npy')):",
                    "new = [p for p in Path(d).iterdir() if p.is_file()]",
                    "names = glob.glob(os.path.join(inbox, '*.png'))",
                    "for root, _, files in os.walk(inbox):", "found = listdir(INBOX)"):
        source = {**WATCHING_SOURCE, ("watch", 32): f"        {listing}"}
        assert classify(threads(WATCHING), gpu_busy=False, source_line=by_frame(source)
                        ).reason.startswith(f"{stack_rules.JOB_WAIT} from a folder"), listing
    # the sleep in a helper of its own, the listing in the caller's loop
    helper = [("/srv/scans/watch.py", "pause", 12), ("/srv/scans/watch.py", "watch", 36),
              ("/srv/scans/watch.py", "<module>", 50)]
    helper_source = {("pause", 11): "def pause():", ("pause", 12): "    time.sleep(POLL_S)",
                     ("watch", 33): "        names = os.listdir(inbox)",
                     ("watch", 34): "        if not names:",
                     ("watch", 35): "            log.debug('inbox empty')",
                     ("watch", 36): "            pause()"}
    found = classify(threads(helper), gpu_busy=False, source_line=by_frame(helper_source))
    assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from a folder"), found
    assert "in its caller watch" in found.reason and found.frame.name == "pause", found
    # a go-flag's wait, a stalled loop's resume file: no job wait (a file wait)
    stalled = {("watch", 32): "        if step >= args.steps and not os.path.exists(resume):",
               ("watch", 34): "            time.sleep(1.0)  # paused until the operator writes"}
    for stack, source in ((AWAIT_TRIGGER, AWAIT_TRIGGER_SOURCE),
                          (WATCHING, {**WATCHING_SOURCE, **stalled})):
        found = classify(threads(stack), gpu_busy=False, source_line=by_frame(source))
        assert found.reason.startswith(stack_rules.FILE_WAIT), (source, found)
    # a listing in the module's code (another function's body, as a module's lines run), a
    # listing beyond POLL_LINES_LOOKED_AT: idle
    far = {("watch", 34 - stack_rules.POLL_LINES_LOOKED_AT - 1): "    names = os.listdir(d)",
           **{("watch", n): "        pass" for n in range(34 - stack_rules.POLL_LINES_LOOKED_AT,
                                                         34)},
           ("watch", 34): "        time.sleep(2)"}
    module = [("/srv/scans/watch.py", "pause", 12), ("/srv/scans/watch.py", "<module>", 36)]
    for stack, source in ((WATCHING, far),
                          (module, {**helper_source, ("<module>", 33): "    os.listdir(inbox)",
                                    ("<module>", 34): "", ("<module>", 35): "",
                                    ("<module>", 36): "pause()"})):
        found = classify(threads(stack), gpu_busy=False, source_line=by_frame(source))
        assert found.phase == "idle", (source, found)
        assert found.reason.startswith("sleeping or waiting"), (source, found)
    # a hostile line: read in linear time, no more than 80 characters of it in the reason
    hostile = {**WATCHING_SOURCE, ("watch", 32): "x = (" * 100_000 + ".listdir(d)"}
    found = classify(threads(WATCHING), gpu_busy=False, source_line=by_frame(hostile))
    assert found.reason.startswith(stack_rules.JOB_WAIT) and len(found.reason) < 400, found


# Probe 152 H2: a trainer that put its model on the GPU, then waits for the done-marker of a
# preprocessing job on the same host (progs/p11_wait_for_file.py), as py-spy dumps it: its
# sleep's line alone, the stat() too short for a dump to catch.
MARKER = [("/home/me/p11_wait_for_file.py", "<module>", 7)]
MARKER_SOURCE = {("<module>", 5): "dev = model_to_gpu()",
                 ("<module>", 6): 'while not os.path.exists("/tmp/probe152-prep/_SUCCESS"):',
                 ("<module>", 7): "    time.sleep(10)",
                 ("<module>", 8): "train(dev)"}


def test_a_sleep_in_a_loop_that_checks_for_a_path_waits_for_a_file():
    """Probe 152 H2: a job sleeping in `while not os.path.exists(marker): time.sleep(10)` read
    'sleeping or waiting' (idle): idle_gpu_held offered the SIGTERM and `mlcostd idle` answered
    idle while the preprocessing job it waited for wrote its shards. A sleep in a loop that
    checks for a path (os.path.exists/isfile/isdir, a Path's exists()/is_file(), the names
    imported bare), the check in the loop's header or its body within POLL_LINES_LOOKED_AT
    lines, or around its caller's line, waits for a file another process writes: FILE_WAIT.
    A check outside the loop the sleep is in, or a redis client's `.exists(key)`, does not."""
    found = classify(threads(MARKER), gpu_busy=False, source_line=by_frame(MARKER_SOURCE))
    assert found.phase == "idle", found
    assert found.reason.startswith(f"{stack_rules.FILE_WAIT}: sleeping (`time.sleep(10)`)"), found
    assert 'os.path.exists("/tmp/probe152-prep/_SUCCESS")' in found.reason, found
    assert "line 6" in found.reason and found.frame == Frame("<module>", MARKER[0][0], 7), found
    for check in ("while not Path(marker).exists():", "while not os.path.isfile(done):",
                  "while not done.is_file():", "while not isfile(done):",
                  "while not os.path.isdir(out) :", "while not osp.exists(done):",
                  "while not path.lexists(done):", "while True:"):
        source = {**MARKER_SOURCE, ("<module>", 6): check}
        if check == "while True:":  # the check in the loop's body, above the sleep
            source = {**source, ("<module>", 7): "    if os.path.exists(flag): break",
                      ("<module>", 8): "    time.sleep(10)", ("<module>", 9): "train(dev)"}
            stack = [("/home/me/p11_wait_for_file.py", "<module>", 8)]
        else:
            stack = MARKER
        found = classify(threads(stack), gpu_busy=False, source_line=by_frame(source))
        assert found.reason.startswith(stack_rules.FILE_WAIT), (check, found)
    # on one line
    one = {("<module>", 7): "while not os.path.exists(marker): time.sleep(10)"}
    found = classify(threads(MARKER), gpu_busy=False, source_line=by_frame(one))
    assert found.reason.startswith(stack_rules.FILE_WAIT), found
    # the sleep in a helper of its own, the check in the caller's loop
    helper = [("/home/me/train.py", "pause", 12), ("/home/me/train.py", "wait_for_data", 22),
              ("/home/me/train.py", "<module>", 40)]
    helper_source = {("pause", 11): "def pause():", ("pause", 12): "    time.sleep(POLL_S)",
                     ("wait_for_data", 20): "def wait_for_data(marker):",
                     ("wait_for_data", 21): "    while not os.path.exists(marker):",
                     ("wait_for_data", 22): "        pause()"}
    found = classify(threads(helper), gpu_busy=False, source_line=by_frame(helper_source))
    assert found.reason.startswith(stack_rules.FILE_WAIT), found
    assert "in its caller wait_for_data" in found.reason and found.frame.name == "pause", found
    # not: a check before the loop the sleep is in, a redis key's exists, a plain sleep loop
    before = {("<module>", 5): "if not os.path.exists(ckpt):",
              ("<module>", 6): "    ckpt = None",
              ("<module>", 7): "while True:",
              ("<module>", 8): "    time.sleep(10)"}
    redis_key = {**MARKER_SOURCE, ("<module>", 6): 'while not r.exists("job:done"):'}
    plain = {**MARKER_SOURCE, ("<module>", 6): "while True:"}
    for source, line in ((before, 8), (redis_key, 7), (plain, 7)):
        stack = [("/home/me/p11_wait_for_file.py", "<module>", line)]
        found = classify(threads(stack), gpu_busy=False, source_line=by_frame(source))
        assert found.phase == "idle" and found.reason.startswith("sleeping or waiting"), (
            source, found)


# Probe 152 M1: a script that asks its user before the long run (progs/p9_input.py), as py-spy
# dumps it at its prompt: input() is C, no frame below the user's line.
ASKING = [("/home/me/p9_input.py", "<module>", 6)]
ASKING_SOURCE = {("<module>", 6): 'ans = input("eval loss 2.31. Start the 12 h fine-tune now? '
                                  '[y/N] ")'}


def test_a_scripts_input_prompt_waits_for_its_user_as_a_repls_prompt_does():
    """Probe 152 M1: a script waiting at `input("... [y/N] ")` read 'sleeping or waiting'
    (idle) and idle_gpu_held offered the SIGTERM, while a REPL at its prompt is looked at
    first. input() on the user's line with no frame below it, its main thread reading no pipe
    (a terminal's read, which /proc names not), is a person's prompt too: PROMPT_WAIT, the
    script's prompt named."""
    for at in (signals(tree_cpu=0.0, main_thread_woke=False), None):
        found = classify(threads(ASKING), gpu_busy=False, source_line=by_frame(ASKING_SOURCE),
                         signals=at)
        assert found.phase == "idle", found
        assert found.reason.startswith(
            f"{stack_rules.PROMPT_WAIT}: {stack_rules.SCRIPT_PROMPT}"), found
        assert "Start the 12 h fine-tune" in found.reason, found
        assert found.frame == Frame("<module>", ASKING[0][0], 6), found
    # at a pipe (a notebook kernel's stdin from Jupyter): a sleep as before, the notebook's own
    # SIGTERM (test_input_on_a_pipe_is_a_prompt_waiting_for_its_user_not_a_job_wait)
    piped = signals(main_thread_blocked_on=proc_state.ANONYMOUS_PIPE, tree_cpu=0.0,
                    main_thread_woke=False)
    found = classify(threads(ASKING), gpu_busy=False, source_line=by_frame(ASKING_SOURCE),
                     signals=piped)
    assert found.reason.startswith("sleeping or waiting"), found
    # a sleep is no prompt; the GPU busy is compute
    sleep = {("<module>", 6): "time.sleep(60)  # input() later"}
    assert classify(threads(ASKING), gpu_busy=False, source_line=by_frame(sleep)
                    ).reason.startswith("sleeping or waiting")
    assert classify(threads(ASKING), gpu_busy=True, source_line=by_frame(ASKING_SOURCE)
                    ).phase == "compute"


# A redis.asyncio worker awaiting BLPOP, as py-spy dumps it (Python 3.11,
# tests/daemon/workloads/redis_async_worker.py): the event loop's select; no coroutine frame.
ASYNC_LOOP = [(f"{STDLIB}/selectors.py", "EpollSelector.select", 468),
              (f"{STDLIB}/asyncio/base_events.py", "BaseEventLoop._run_once", 1884),
              (f"{STDLIB}/asyncio/base_events.py", "BaseEventLoop.run_forever", 607),
              (f"{STDLIB}/asyncio/base_events.py", "BaseEventLoop.run_until_complete", 640),
              (f"{STDLIB}/asyncio/runners.py", "Runner.run", 118),
              (f"{STDLIB}/asyncio/runners.py", "run", 190),
              ("/home/me/worker.py", "main", 42), ("/home/me/worker.py", "<module>", 46)]


def test_an_asyncio_loop_waiting_on_connections_it_opened_waits_for_its_next_job():
    """It read 'waiting in select' (idle), and idle_gpu_held offered the SIGTERM to a
    redis.asyncio worker awaiting BLPOP. Its event loop waiting while it holds TCP connections
    it opened waits for its next job; with none (a timer's wait), not read, or a notebook
    kernel's loop (tornado), it stays idle."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=True, connections_opened=1)
    found = classify(threads(ASYNC_LOOP), gpu_busy=False, source_line=no_source, signals=slept)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "asyncio event loop" in found.reason and "1 TCP connection " in found.reason
    assert found.frame == Frame("main", "/home/me/worker.py", 42)
    kernel = [*ASYNC_LOOP[:6], (f"{SITE_PACKAGES}/tornado/platform/asyncio.py",
                                "BaseAsyncIOLoop.start", 205),
              (f"{SITE_PACKAGES}/ipykernel/kernelapp.py", "IPKernelApp.start", 739),
              *ASYNC_LOOP[6:]]
    for stack, signals in ((ASYNC_LOOP, dataclasses.replace(slept, connections_opened=0)),
                           (ASYNC_LOOP, dataclasses.replace(slept, connections_opened=None)),
                           (ASYNC_LOOP, None), (kernel, slept)):
        found = classify(threads(stack), gpu_busy=False, source_line=no_source, signals=signals)
        assert found.phase == "idle", (signals, found)
        assert not found.reason.startswith(stack_rules.JOB_WAIT), (stack, signals, found)
    # its GPU busy meanwhile (a thread per GPU): compute, as any other wait
    assert classify(threads(ASYNC_LOOP), gpu_busy=False, source_line=no_source, signals=slept,
                    busy_elsewhere=True).phase == "compute"


# A Celery worker between tasks, as py-spy dumps it (Python 3.11, celery 5.7, kombu 5.7, a
# redis broker): the solo pool's worker (and a prefork pool's parent) in its consumer's event
# loop, and a prefork pool's process reading its next task from its parent.
CELERY_WORKER = [(f"{SITE_PACKAGES}/kombu/utils/eventio.py", "_epoll.poll", 83),
                 (f"{SITE_PACKAGES}/kombu/asynchronous/hub.py", "Hub.create_loop", 406),
                 (f"{SITE_PACKAGES}/celery/worker/loops.py", "asynloop", 130),
                 (f"{SITE_PACKAGES}/celery/worker/consumer/consumer.py", "Evloop.start", 944),
                 (f"{SITE_PACKAGES}/celery/bootsteps.py", "Blueprint.start", 116),
                 (f"{SITE_PACKAGES}/celery/worker/consumer/consumer.py", "Consumer.start", 406),
                 (f"{SITE_PACKAGES}/celery/worker/worker.py", "WorkController.start", 271),
                 (f"{SITE_PACKAGES}/celery/bin/worker.py", "worker", 400),
                 (f"{SITE_PACKAGES}/celery/bin/celery.py", "main", 232),
                 (f"{SITE_PACKAGES}/celery/__main__.py", "main", 15),
                 ("/srv/venv/bin/celery", "<module>", 6)]
CELERY_POOL_PROCESS = [
    (f"{SITE_PACKAGES}/billiard/connection.py", "Connection._recv", 425),
    (f"{SITE_PACKAGES}/billiard/connection.py", "Connection._recv_bytes", 459),
    (f"{SITE_PACKAGES}/billiard/connection.py", "_ConnectionBase.recv_bytes", 240),
    (f"{SITE_PACKAGES}/billiard/queues.py", "_SimpleQueue.get_payload", 360),
    (f"{SITE_PACKAGES}/billiard/pool.py", "Worker._make_recv_method.<locals>._recv", 506),
    (f"{SITE_PACKAGES}/billiard/pool.py", "Worker._make_protected_receive.<locals>.receive",
     534),
    (f"{SITE_PACKAGES}/billiard/pool.py", "Worker.workloop", 357),
    (f"{SITE_PACKAGES}/billiard/pool.py", "Worker.__call__", 293),
    (f"{SITE_PACKAGES}/billiard/process.py", "BaseProcess._bootstrap", 356),
    (f"{SITE_PACKAGES}/celery/concurrency/prefork.py", "TaskPool.on_start", 182),
    *CELERY_WORKER[6:]]


def test_a_celery_worker_between_tasks_waits_for_its_next_job():
    """It read 'main thread blocked with the GPU idle' (idle): idle_gpu_held offered the
    SIGTERM to a Celery worker (solo pool) waiting for its broker's next task, and to a prefork
    pool's processes waiting for theirs. A task the solo pool runs is the task's, not a wait."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    for stack, says in ((CELERY_WORKER, "Celery broker"),
                        (CELERY_POOL_PROCESS, "Celery prefork pool")):
        for signals in (slept, None):
            found = classify(threads(stack), gpu_busy=False, source_line=no_source,
                             signals=signals)
            assert found.phase == "idle", found
            assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
            assert says in found.reason, found.reason
    # a task the solo pool runs, reading its input: the task's line and its read
    task = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
            (f"{STDLIB}/http/client.py", "HTTPResponse.read", 466),
            ("/srv/app/tasks.py", "transcribe", 31),
            (f"{SITE_PACKAGES}/celery/app/trace.py", "trace_task", 479),
            (f"{SITE_PACKAGES}/kombu/asynchronous/hub.py", "Hub.create_loop", 373),
            *CELERY_WORKER[2:]]
    found = classify(threads(task), gpu_busy=False, source_line=no_source, signals=slept)
    assert found.phase == "data_wait", found
    assert found.frame == Frame("transcribe", "/srv/app/tasks.py", 31)
    # kombu's poll outside a Celery worker's loop (a kombu consumer of its own): no rule here
    alone = [CELERY_WORKER[0], CELERY_WORKER[1], ("/home/me/consume.py", "main", 20)]
    found = classify(threads(alone), gpu_busy=False, source_line=no_source, signals=slept)
    assert not found.reason.startswith(stack_rules.JOB_WAIT), found


def test_a_reader_thread_does_not_change_the_gpu_busy_paths_nor_a_join():
    busy_reader = ([READER_LINE, *THREAD_RUN], True)
    # a thread per GPU: GPU busy meanwhile, the waiting main thread is compute
    assert classify(threads(QUEUE_GET, busy_reader), gpu_busy=False, source_line=no_source,
                    busy_elsewhere=True).phase == "compute"
    assert classify(threads(QUEUE_GET, busy_reader), gpu_busy=True,
                    source_line=no_source).phase == "compute"
    # a main thread that only starts the thread running the loop joins it: not a hand-over
    joined = [(f"{STDLIB}/threading.py", "Thread._wait_for_tstate_lock", 1139),
              (f"{STDLIB}/threading.py", "Thread.join", 1119), (USER, "main", 30)]
    assert classify(threads(joined, busy_reader), gpu_busy=False,
                    source_line=no_source).phase == "idle"
    assert classify(threads(joined, busy_reader), gpu_busy=False, source_line=no_source,
                    busy_elsewhere=True).phase == "compute"


def test_worker_processes_are_dumped_for_a_thread_that_iterates_a_dataloader_not_a_reader():
    """A thread that iterates a DataLoader with workers fills the queue: its workers read. A
    reader thread reads in the same dump, and the process's children are not its workers."""
    iterating = [(f"{SITE}/torch/utils/data/dataloader.py",
                  "_MultiProcessingDataLoaderIter._try_get_data", 1133),
                 (f"{SITE}/torch/utils/data/dataloader.py",
                  "_MultiProcessingDataLoaderIter._next_data", 1294),
                 ("/home/me/prefetch.py", "fill", 12), *THREAD_RUN]
    dump = threads(QUEUE_GET, (iterating, False))
    assert waits_on_data_queue(dump)
    assert classify(dump, gpu_busy=False, source_line=no_source).phase == "data_wait"
    assert not waits_on_data_queue(threads(QUEUE_GET, ([READER_LINE, *THREAD_RUN], True)))
    assert not waits_on_data_queue(threads(QUEUE_GET, ([READER_LINE, *THREAD_RUN], False)))


QUEUE_PREFETCH = WORKLOADS / "queue_prefetch.py"
# the reader's read (before it, it waits in open() for the FIFO's writer to start)
READ_LINE = next(n for n, text in enumerate(QUEUE_PREFETCH.read_text().splitlines(), start=1)
                 if "shard.read(CHUNK)" in text)


def _dump_until(proc: subprocess.Popen[str], ready) -> list[ThreadStack]:
    """Dumps of `proc` until `ready(main, reader)` says both threads are where the test wants
    them (a deadline, no fixed sleep)."""
    sampler = StackSampler(min_interval_s=0.0, global_max_per_s=100.0, cpu_budget_ratio=1.0)
    deadline = time.monotonic() + 30
    seen = None
    while time.monotonic() < deadline:
        result = asyncio.run(sampler.dump(proc.pid))
        assert result.status == "ok", result.error
        by_name = {t.thread_name: t for t in result.threads}
        main, reader = by_name.get("MainThread"), by_name.get("reader")
        if main is not None and reader is not None and ready(main, reader):
            return result.threads
        seen = result.threads
    raise AssertionError(f"the threads never got there: {seen}")


def _in_queue_get(main: ThreadStack) -> bool:
    return bool(main.frames) and main.frames[0].name.endswith("Condition.wait") \
        and any(f.name.endswith("Queue.get") for f in main.frames)


def _start(mode: str, tmp_path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(QUEUE_PREFETCH), mode, str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill `proc` and its children (the slow-storage helper, a Pool's workers). Stopped
    first: a multiprocessing Pool's parent starts a worker in place of each one killed, and
    one started between the children's kill and its own was left running (seen after a CI
    run: a pool_loader.py worker, its parent gone)."""
    try:
        parent = psutil.Process(proc.pid)
        parent.suspend()
        for child in parent.children(recursive=True):
            child.kill()
    except psutil.NoSuchProcess:
        pass
    proc.kill()
    proc.wait()


needs_py_spy_and_root = pytest.mark.skipif(find_py_spy() is None or os.geteuid() != 0,
                                           reason="needs py-spy and root")


@needs_py_spy_and_root
def test_live_loop_fed_by_a_slow_reader_thread_waits_for_data_at_the_reader_line(tmp_path):
    """A real program (no torch, no mlcost): a reader thread reads a FIFO that a helper fills
    slowly and puts batches on a queue.Queue; the loop waits in q.get(). Its dump is data wait,
    and the stack sample the daemon keeps, and so the phase balance's top stack, is the
    reader's line."""
    from daemon.config import AttributionConfig
    from daemon.runtime.attribution import Attribution
    from daemon.sources.sample import GpuUse, ProcessSample
    from daemon.store.writer import Store

    proc = _start("read", tmp_path)
    store = Store(tmp_path / "mlcost.db")
    try:
        dump = _dump_until(proc, lambda main, reader: _in_queue_get(main) and bool(reader.frames)
                           and reader.frames[0].name == "read_batches"
                           and reader.frames[0].line == READ_LINE)
        found = classify(dump, gpu_busy=False, source_line=source_reader(proc.pid, credentials(proc.pid)))
        assert found.phase == "data_wait", found
        assert found.frame is not None and found.frame.name == "read_batches"
        assert found.frame.filename.endswith("queue_prefetch.py")
        assert "'reader'" in found.reason and "shard.read(CHUNK)" in found.reason, found.reason
        # what the daemon stores of it: the reader's stack, so the balance points at its line
        sample = ProcessSample(proc.pid, psutil.Process(proc.pid).create_time(), os.getpid(),
                               "ann", "python queue_prefetch.py", (GpuUse(0, 1 << 30, 0.0),))
        attribution = Attribution(AttributionConfig(), store, StackSampler())
        [row] = attribution._rows(sample, DumpResult(proc.pid, time.time(), "ok", dump), 0.0,
                                  credentials(proc.pid), busy_elsewhere=False)
        reader = next(t for t in dump if t.thread_name == "reader")
        assert (row.phase, row.thread_id) == ("data_wait", reader.thread_id)
        frames = tuple(Frame(*f) for f in row.frames)
        balance = phase_balance([StackSample(row.ts, row.pid, row.thread_id, row.stack_hash,
                                             frames, row.phase, 0.0, row.reason)], 10.0, 0.0)
        [top] = balance["data_wait"]["top_stacks"]
        assert top["file"].endswith("queue_prefetch.py") and top["function"] == "read_batches"
        assert top["line"] == found.frame.line == READ_LINE
    finally:
        store.close()
        _stop(proc)


@needs_py_spy_and_root
def test_live_loop_fed_by_a_decoding_reader_thread_waits_for_data(tmp_path):
    proc = _start("decode", tmp_path)
    try:
        dump = _dump_until(proc, lambda main, reader: _in_queue_get(main) and reader.active
                           and bool(reader.frames) and reader.frames[0].name == "decode_batches")
        found = classify(dump, gpu_busy=False, source_line=source_reader(proc.pid, credentials(proc.pid)))
        assert found.phase == "data_wait", found
        assert found.frame is not None and found.frame.name == "decode_batches"
    finally:
        _stop(proc)


@needs_py_spy_and_root
def test_live_loop_waiting_on_a_queue_nobody_fills_stays_idle(tmp_path):
    """The same loop whose reader waits on an Event nobody sets: the process waits for
    nothing, as a server between requests does. Idle, not data wait."""
    proc = _start("quiet", tmp_path)
    try:
        dump = _dump_until(proc, lambda main, reader: _in_queue_get(main)
                           and any(f.name.endswith("Event.wait") for f in reader.frames))
        found = classify(dump, gpu_busy=False, source_line=source_reader(proc.pid, credentials(proc.pid)))
        assert found.phase == "idle", found
        assert found.thread is None
    finally:
        _stop(proc)


POOL_LOADER = WORKLOADS / "pool_loader.py"


@needs_py_spy_and_root
def test_live_loop_fed_by_a_multiprocessing_pool_waits_for_data_not_idle():
    """A real program (no torch, no mlcost): Pool.imap's workers decode, busy on their CPUs,
    while the loop waits in the pool's iterator. Its dump read 'idle' (Condition.wait), and
    idle_gpu_held then offered to SIGTERM a job whose workers ran at 90-100% CPU."""
    proc = subprocess.Popen([sys.executable, str(POOL_LOADER)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        sampler = StackSampler(min_interval_s=0.0, global_max_per_s=100.0, cpu_budget_ratio=1.0)
        deadline, seen = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            result = asyncio.run(sampler.dump(proc.pid))
            assert result.status == "ok", result.error
            main = next((t for t in result.threads if t.thread_name == "MainThread"), None)
            if main is not None and any(f.filename.endswith("multiprocessing/pool.py")
                                        and "next" in f.name for f in main.frames):
                break  # waiting in imap's next()
            seen = result.threads
        else:
            raise AssertionError(f"the loop never waited on its pool: {seen}")
        found = classify(result.threads, gpu_busy=False, source_line=source_reader(proc.pid, credentials(proc.pid)))
        assert found.phase == "data_wait", found
        assert "multiprocessing Pool" in found.reason, found.reason
        assert found.frame is not None and found.frame.filename.endswith("pool_loader.py")
    finally:
        _stop(proc)



# The dumps of tests/daemon/workloads' folder watchers (py-spy 0.4, Python 3.11, watchdog 7.1):
# a main thread joining watchdog's observer (its documented loop), and the observer's threads.
WATCHDOG_MAIN = [(f"{STDLIB}/threading.py", "Thread._wait_for_tstate_lock", 1139),
                 (f"{STDLIB}/threading.py", "Thread.join", 1123),
                 ("/srv/tagger.py", "main", 58), ("/srv/tagger.py", "<module>", 65)]
WATCHDOG_THREADS = [
    ([(f"{SITE_PACKAGES}/watchdog/observers/inotify_c.py", "InotifyFD._check_inotify_fd", 479),
      (f"{SITE_PACKAGES}/watchdog/observers/inotify_c.py", "InotifyFD._read_event_buffer", 499),
      (f"{SITE_PACKAGES}/watchdog/observers/inotify_c.py", "InotifyFD.run", 340),
      (f"{STDLIB}/threading.py", "Thread._bootstrap_inner", 1045)], False),
    ([(f"{STDLIB}/threading.py", "Condition.wait", 327),
      (f"{STDLIB}/queue.py", "Queue.get", 171),
      (f"{SITE_PACKAGES}/watchdog/observers/api.py", "BaseObserver.dispatch_events", 475),
      (f"{SITE_PACKAGES}/watchdog/observers/api.py", "EventDispatcher.run", 248),
      (f"{STDLIB}/threading.py", "Thread._bootstrap_inner", 1045)], False)]
QUIET = dict(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
             main_thread_woke=False, connections_opened=0)


def test_a_main_thread_blocked_on_an_inotify_descriptor_waits_for_its_next_file():
    """A worker blocked reading its inotify descriptor (os.read in C: no frame below its line)
    read "reading" (data wait: the prefetch patch); one in selectors.select on it, "waiting in
    select" (the SIGTERM). /proc says the descriptor is inotify (INOTIFY): its next file."""
    quiet = HostSignals(**QUIET, main_thread_blocked_on=proc_state.INOTIFY)
    line = "for name in names(os.read(fd, 65536)):"
    read = [("/srv/ocr.py", "main", 78), ("/srv/ocr.py", "<module>", 83)]
    selected = [(f"{STDLIB}/selectors.py", "EpollSelector.select", 468), *read]
    for stack in (read, selected):
        found = classify(threads(stack), gpu_busy=False, source_line=lambda f: line,
                         repeated_leaf=True, signals=quiet)
        assert found.phase == "idle", found
        assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from a folder it watches: "
                                       f"blocked on {proc_state.INOTIFY} (`{line}`"), found
        assert found.frame == Frame("main", "/srv/ocr.py", 78)
    # a pipe's read is still a pipe's, and a read /proc says nothing of stays what its line says
    for said in (None, proc_state.TIMER_WAKES):
        found = classify(threads(read), gpu_busy=False, source_line=lambda f: line,
                         signals=HostSignals(**QUIET, main_thread_blocked_on=said))
        assert "folder" not in found.reason and found.phase == "data_wait", (said, found)


def test_a_main_thread_beside_a_watchdog_observer_waits_for_its_next_file():
    """watchdog's observer runs the handler in its thread while the main thread joins it:
    "waiting in Thread.join" (the SIGTERM). With a watchdog observer's thread in the process,
    its next file; without one, the same join stays idle and no job wait; a main thread that
    computes is not waiting."""
    for main, others in ((WATCHDOG_MAIN, WATCHDOG_THREADS),
                         ([("/srv/tagger.py", "main", 60)], WATCHDOG_THREADS[1:])):
        found = classify(threads(main, *others), gpu_busy=False,
                         source_line=lambda f: "time.sleep(1)", signals=HostSignals(**QUIET))
        assert found.phase == "idle", found
        assert found.reason.startswith(f"{stack_rules.JOB_WAIT} from a folder it watches with "
                                       "watchdog (its observer's thread "), found
        assert found.frame is not None and found.frame.filename == "/srv/tagger.py"
    alone = classify(threads(WATCHDOG_MAIN), gpu_busy=False, source_line=no_source,
                     signals=HostSignals(**QUIET))
    assert alone.phase == "idle" and not alone.reason.startswith(stack_rules.JOB_WAIT), alone
    busy = classify(threads(WATCHDOG_MAIN, *WATCHDOG_THREADS), gpu_busy=False,
                    source_line=no_source, busy_elsewhere=True, signals=HostSignals(**QUIET))
    assert busy.phase == "compute", busy
    computing = dataclasses.replace(HostSignals(**QUIET), main_thread_cpu=0.9)
    found = classify(threads(WATCHDOG_MAIN, *WATCHDOG_THREADS), gpu_busy=False,
                     source_line=no_source, signals=computing)
    assert found.phase == "host_preprocess", found


def test_an_asyncio_loop_that_a_timer_wakes_soon_is_a_timer_wait_not_a_job_wait():
    """An asyncio inbox poller (`await asyncio.sleep(1)` between listings) and a stalled
    asyncio job both showed the loop's select alone: "waiting in select", the SIGTERM. A loop
    whose epoll wait a timer ends within a minute (TIMER_WAKES, from /proc) is TIMER_WAIT,
    which the rules look at first; one with no timer or a longer one (a stalled
    `await event.wait()`, `await asyncio.sleep(3600)`: None) stays idle in select, and so does
    a notebook kernel's loop with a timer."""
    timer = HostSignals(**QUIET, main_thread_blocked_on=proc_state.TIMER_WAKES)
    found = classify(threads(ASYNC_LOOP), gpu_busy=False, source_line=no_source, signals=timer)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.TIMER_WAIT), found
    assert not found.reason.startswith(stack_rules.JOB_WAIT)
    assert found.frame == Frame("main", "/home/me/worker.py", 42)
    kernel = [*ASYNC_LOOP[:6], (f"{SITE_PACKAGES}/tornado/platform/asyncio.py",
                                "BaseAsyncIOLoop.start", 205),
              (f"{SITE_PACKAGES}/ipykernel/kernelapp.py", "IPKernelApp.start", 739),
              *ASYNC_LOOP[6:]]
    for stack, said in ((ASYNC_LOOP, None), (kernel, proc_state.TIMER_WAKES)):
        found = classify(threads(stack), gpu_busy=False, source_line=no_source,
                         signals=HostSignals(**QUIET, main_thread_blocked_on=said))
        assert found.phase == "idle", found
        assert not found.reason.startswith((stack_rules.TIMER_WAIT, stack_rules.JOB_WAIT)), found
    # a plain selectors loop (no asyncio) with a timer: what its frames say, as before
    plain = [(f"{STDLIB}/selectors.py", "EpollSelector.select", 468), ("/srv/x.py", "main", 9)]
    found = classify(threads(plain), gpu_busy=False, source_line=no_source, signals=timer)
    assert not found.reason.startswith(stack_rules.TIMER_WAIT), found


# A worker whose reader thread reads jobs from a TCP connection it opened to a dispatcher
# (`for line in sock.makefile("r"): jobs.put(line)`) while its main thread takes them with
# jobs.get(): the reader blocks in socket.py between jobs (py-spy: not active).
SOCKET_READER = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
                 ("/home/me/worker.py", "receiver", 18), *THREAD_RUN]


def test_a_main_thread_taking_jobs_a_socket_reader_thread_receives_waits_for_its_next_job():
    """Probe 109: the main thread's queue.get read "waiting in Condition.wait" (a reader on a
    bare socket is no input work), and idle_gpu_held offered the SIGTERM between jobs, the host
    its stop, /v1/idle "idle". Nothing came over the tick (its main thread slept through it):
    a worker waiting for its next job, as one whose main thread reads the socket itself."""
    slept = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.0, tree_cpu=0.0,
                        main_thread_woke=False)
    dump = threads(QUEUE_GET, (SOCKET_READER, False))
    found = classify(dump, gpu_busy=False, source_line=no_source, signals=slept)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "'worker-2'" in found.reason and "socket.py:706 SocketIO.readinto" in found.reason
    assert found.frame == Frame("train", USER, 57)
    # a recv in C on the reader's line, and a SimpleQueue's get in C on the main thread's
    recv = [("/home/me/worker.py", "receiver", 21), *THREAD_RUN]
    reading = lines(receiver="data = conn.recv(4096)", train="job = jobs.get()")
    for main in (QUEUE_GET, [(USER, "train", 57)]):
        found = classify(threads(main, (recv, False)), gpu_busy=False, source_line=reading,
                         signals=slept)
        assert found.reason.startswith(stack_rules.JOB_WAIT), (main, found)
    # something came (the main thread woke), not measured, or a child computing: a plain wait
    for other in (dataclasses.replace(slept, main_thread_woke=True),
                  dataclasses.replace(slept, main_thread_woke=None),
                  dataclasses.replace(slept, tree_cpu=0.9), None):
        found = classify(dump, gpu_busy=False, source_line=no_source, signals=other)
        assert found.reason.startswith("waiting in Condition.wait"), (other, found)
    # a library's own thread on a socket (no user frame: a telemetry client), a reader at
    # work, threads deadlocked on two locks, a future's remote call: not a job wait
    library = [(f"{STDLIB}/socket.py", "SocketIO.readinto", 706),
               (f"{SITE}/wandb/sdk/lib/sock_client.py", "SockClient._read_packet", 200),
               *THREAD_RUN]
    deadlocked = [(f"{STDLIB}/threading.py", "Lock.acquire", 1), ("/home/me/job.py", "saver", 25),
                  *THREAD_RUN]
    for others in ([(library, False)], [(SOCKET_READER, True)], [(deadlocked, False)] * 2):
        found = classify(threads(QUEUE_GET, *others), gpu_busy=False, source_line=no_source,
                         signals=slept)
        assert not found.reason.startswith(stack_rules.JOB_WAIT), (others, found)
    found = classify(threads(FUTURE_WAITS["result"], (SOCKET_READER, False)), gpu_busy=False,
                     source_line=no_source, signals=slept)
    assert not found.reason.startswith(stack_rules.JOB_WAIT), found


# The same worker taking its jobs with jobs.get(timeout=1) in a loop (so it looks at a stop flag
# between tries), as py-spy dumps it (Python 3.11): the timed branches of Queue.get and
# Condition.wait, a few lines below the untimed ones.
TIMED_QUEUE_GET = [(f"{STDLIB}/threading.py", "Condition.wait", 331),
                   (f"{STDLIB}/queue.py", "Queue.get", 180),
                   (USER, "train", 57)]
TIMED_SOURCE = {"Condition.wait": "gotit = waiter.acquire(True, timeout)",
                "Queue.get": "self.not_empty.wait(remaining)",
                "train": "job = jobs.get(timeout=1)"}


def test_a_main_thread_taking_jobs_with_a_timeout_waits_for_its_next_job_as_without_one():
    """The timed form of the worker above (`jobs.get(timeout=1)`: Condition.wait(timeout), the
    lock's acquire with a timeout) wakes every second, finds the queue empty and waits again:
    its main thread never slept through a tick, so it read "waiting in Condition.wait" and got
    idle_gpu_held's SIGTERM, the host's stop and /v1/idle "idle". A timed wait's wake-ups cost
    microseconds on a CPU: woken, but on a CPU under TIMED_WAKES_CPU_MAX, nothing came to it."""
    from daemon.analysis.host_signals import TIMED_WAKES_CPU_MAX

    looked = HostSignals(seconds=3.0, main_thread_cpu=0.0004, process_cpu=0.001, tree_cpu=0.001,
                         main_thread_woke=True)
    dump = threads(TIMED_QUEUE_GET, (SOCKET_READER, False))
    found = classify(dump, gpu_busy=False, source_line=lines(**TIMED_SOURCE), signals=looked)
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "'worker-2'" in found.reason and "socket.py:706 SocketIO.readinto" in found.reason
    assert "woke only as its wait's timeout ran out, on a CPU under 5% of the time" in found.reason
    assert found.frame == Frame("train", USER, 57)
    # the timeout read from the user's line alone (stdlib unread), and a SimpleQueue's in C
    user_only = lines(train="job = jobs.get(timeout=1)")
    for main in (TIMED_QUEUE_GET, [(USER, "train", 57)]):
        found = classify(threads(main, (SOCKET_READER, False)), gpu_busy=False,
                         source_line=user_only, signals=looked)
        assert found.reason.startswith(stack_rules.JOB_WAIT), (main, found)
    # asleep through the tick it reads as the untimed wait did
    found = classify(dump, gpu_busy=False, source_line=lines(**TIMED_SOURCE),
                     signals=dataclasses.replace(looked, main_thread_woke=False))
    assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
    assert "slept through the last tick" in found.reason
    # woken and on a CPU (a job came and it ran), not measured, or a child computing: a plain
    # wait, timed or not; and an untimed wait that woke (something came) is one too
    for other in (dataclasses.replace(looked, main_thread_cpu=TIMED_WAKES_CPU_MAX),
                  dataclasses.replace(looked, main_thread_cpu=None),
                  dataclasses.replace(looked, main_thread_woke=None),
                  dataclasses.replace(looked, tree_cpu=0.9), None):
        found = classify(dump, gpu_busy=False, source_line=lines(**TIMED_SOURCE), signals=other)
        assert found.reason.startswith("waiting in Condition.wait"), (other, found)
    untimed = lines(**{"Condition.wait": "waiter.acquire()", "train": "job = jobs.get()"})
    for main in (QUEUE_GET, TIMED_QUEUE_GET):
        found = classify(threads(main, (SOCKET_READER, False)), gpu_busy=False,
                         source_line=untimed, signals=looked)
        assert found.reason.startswith("waiting in Condition.wait"), (main, found)
    found = classify(dump, gpu_busy=False, source_line=no_source, signals=looked)
    assert found.reason.startswith("waiting in Condition.wait"), found  # no line says timed
    # no thread on the network (a timed get on a queue no reader fills, threads deadlocked on
    # locks), a reader at work: a timed wait like any other
    deadlocked = [(f"{STDLIB}/threading.py", "Lock.acquire", 1), ("/home/me/job.py", "saver", 25),
                  *THREAD_RUN]
    for others in ([], [(SOCKET_READER, True)], [(deadlocked, False)] * 2):
        found = classify(threads(TIMED_QUEUE_GET, *others), gpu_busy=False,
                         source_line=lines(**TIMED_SOURCE), signals=looked)
        assert found.reason.startswith("waiting in Condition.wait"), (others, found)
    # a time.sleep loop beside the same reader thread (it polls a flag between sleeps) is no
    # hand-over: not a consumer, whatever its wake-ups
    sleeping = [(USER, "train", 61)]
    for signals in (looked, dataclasses.replace(looked, main_thread_woke=False)):
        found = classify(threads(sleeping, (SOCKET_READER, False)), gpu_busy=False,
                         source_line=lines(train="time.sleep(1)"), signals=signals)
        assert found.phase == "idle", found
        assert not found.reason.startswith(stack_rules.JOB_WAIT), found


@pytest.mark.parametrize(("line", "below"), [
    ("with open(args.fifo) as batch:", []),
    ("with Path(args.fifo).open() as batch:", [(f"{STDLIB}/pathlib.py", "Path.open", 1044)]),
    ("fd = os.open(args.fifo, os.O_RDONLY)", []),
    ("batch = Path(args.fifo).read_text()", [(f"{STDLIB}/pathlib.py", "Path.open", 1044),
                                             (f"{STDLIB}/pathlib.py", "Path.read_text", 1058)]),
    ("batch = Path(args.fifo).read_text()", [(f"{STDLIB}/pathlib.py", "Path.read_text", 1059)]),
    ("batch = fifo.read_bytes()", [(f"{STDLIB}/pathlib.py", "Path.read_bytes", 1051)]),
])
def test_a_fifo_open_or_read_is_a_job_wait_whichever_python_call_made_it(line, below):
    """Probe 132 L2 follow-up: a main thread blocked on a named pipe (opening it with no writer,
    wchan wait_for_partner, or reading it) waits for its next job whichever Python call opened
    it: /proc's facts are the evidence; pathlib's frames below the user's line (Path.open,
    Path.read_text) only say how. They read as "reading a file or socket" (data wait, told to
    prefetch) or as a plain sleep (SIGTERM), where the builtin open() read as the job wait."""
    threads = stack(*below, (USER, "main", 27))
    quiet = signals(main_thread_blocked_on="a named pipe (FIFO)", main_thread_woke=False,
                    tree_cpu=0.0)
    found = classify(threads, gpu_busy=False, source_line=lambda f: line, signals=quiet)
    assert found.phase == "idle", found
    assert found.reason.startswith(f"{stack_rules.JOB_WAIT} on a named pipe (FIFO) nothing "
                                   f"came to (`{line.strip()}`"), found
    assert found.frame == Frame("main", USER, 27)
    woke = signals(main_thread_blocked_on="a named pipe (FIFO)", main_thread_woke=True,
                   tree_cpu=0.01, gpu_busy=True)
    found = classify(threads, gpu_busy=False, source_line=lambda f: line, signals=woke)
    assert found.phase == "data_wait", found
    assert found.reason == f"reading a named pipe (FIFO) (`{line.strip()}`)", found


# A GPU child of a pipeline in its parent's multiprocessing.Queue get (probe 143 F1), and a
# worker that dialled its coordinator with multiprocessing.connection.Client, in its recv (F6),
# as py-spy dumps them (Python 3.11); a poll with a timeout waits in select below the poll.
MPQ_CHILD = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._recv", 395),
             (f"{STDLIB}/multiprocessing/connection.py", "Connection._recv_bytes", 430),
             (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.recv_bytes", 216),
             (f"{STDLIB}/multiprocessing/queues.py", "Queue.get", 103),
             ("/srv/pipeline/mpq_worker.py", "gpu_worker", 11),
             (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.run", 108),
             (f"{STDLIB}/multiprocessing/process.py", "BaseProcess._bootstrap", 314),
             (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen._launch", 71),
             (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.__init__", 19),
             (f"{STDLIB}/multiprocessing/context.py", "ForkProcess._Popen", 281),
             ("/srv/pipeline/mpq_worker.py", "main", 19),
             ("/srv/pipeline/mpq_worker.py", "<module>", 26)]
CLIENT_RECV = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._recv", 395),
               (f"{STDLIB}/multiprocessing/connection.py", "Connection._recv_bytes", 430),
               (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.recv", 250),
               ("/srv/mp_client_worker.py", "main", 31),
               ("/srv/mp_client_worker.py", "<module>", 36)]
SIMPLE_GET = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._recv", 395),
              (f"{STDLIB}/multiprocessing/connection.py", "Connection._recv_bytes", 430),
              (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.recv_bytes", 216),
              (f"{STDLIB}/multiprocessing/queues.py", "SimpleQueue.get", 364),
              (USER, "serve_jobs", 40)]
PIPE_POLL = [(f"{STDLIB}/selectors.py", "PollSelector.select", 416),
             (f"{STDLIB}/multiprocessing/connection.py", "wait", 947),
             (f"{STDLIB}/multiprocessing/connection.py", "Connection._poll", 440),
             (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.poll", 257),
             (USER, "serve_jobs", 52)]
# A torch DataLoader's main process waiting on its workers' queue, and one of its workers
# waiting on its index queue: the DataLoader's own, never a job wait.
DATALOADER = f"{SITE}/torch/utils/data/dataloader.py"
LOADER_MAIN = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._poll", 440),
               (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.poll", 257),
               (f"{STDLIB}/multiprocessing/queues.py", "Queue.get", 113),
               (DATALOADER, "_MultiProcessingDataLoaderIter._try_get_data", 1133),
               (DATALOADER, "_MultiProcessingDataLoaderIter._get_data", 1294),
               (DATALOADER, "_MultiProcessingDataLoaderIter._next_data", 1332),
               (DATALOADER, "_BaseDataLoaderIter.__next__", 631),
               (USER, "train", 61)]
LOADER_WORKER = [(f"{STDLIB}/multiprocessing/connection.py", "Connection._poll", 440),
                 (f"{STDLIB}/multiprocessing/connection.py", "_ConnectionBase.poll", 257),
                 (f"{STDLIB}/multiprocessing/queues.py", "Queue.get", 113),
                 (f"{SITE}/torch/utils/data/_utils/worker.py", "_worker_loop", 308),
                 (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.run", 108),
                 (f"{STDLIB}/multiprocessing/process.py", "BaseProcess._bootstrap", 314)]


@pytest.mark.parametrize("frames", [MPQ_CHILD, CLIENT_RECV, SIMPLE_GET, PIPE_POLL],
                         ids=["Queue.get", "Client.recv", "SimpleQueue.get", "Connection.poll"])
def test_a_worker_fed_through_a_multiprocessing_queue_or_pipe_waits_for_its_next_job(frames):
    """It read 'waiting in a multiprocessing pipe' (a plain wait), and idle_gpu_held offered
    the SIGTERM to a worker between jobs, also right after a job (probe 143 F1, F6): another
    process hands it its work, as a Pool's worker's task queue does. Idle, waiting for its
    next job, at the user's line; with its children at work it is still fed by them (data
    wait), and with its GPU busy meanwhile compute."""
    quiet = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.01, tree_cpu=0.01)
    user = next(Frame(n, f, ln) for f, n, ln in frames if "multiprocessing" not in f
                and "selectors" not in f)
    for signals in (quiet, None):
        found = classify(threads(frames), gpu_busy=False, source_line=no_source,
                         signals=signals)
        assert found.phase == "idle", found
        assert found.reason.startswith(stack_rules.JOB_WAIT), found.reason
        assert "multiprocessing queue or pipe" in found.reason, found.reason
        assert found.frame == user, found
    feeding = dataclasses.replace(quiet, tree_cpu=1.02)
    fed = classify(threads(frames), gpu_busy=False, source_line=no_source, signals=feeding)
    assert fed.phase == "data_wait" and stack_rules.WORKER_PROCESSES_FEED_IT in fed.reason, fed
    assert classify(threads(frames), gpu_busy=False, source_line=no_source, signals=quiet,
                    busy_elsewhere=True).phase == "compute"


def test_a_dataloader_waiting_on_its_workers_queue_is_no_job_wait():
    """A torch DataLoader's main process in its workers' queue's get is data wait, its
    workers between batches no job consumers, whatever its children do."""
    for signals in (HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.01,
                                tree_cpu=0.01), None):
        main = classify(threads(LOADER_MAIN), gpu_busy=False, source_line=no_source,
                        signals=signals)
        assert main.phase == "data_wait", main
        worker = classify(threads(LOADER_WORKER), gpu_busy=False, source_line=no_source,
                          signals=signals)
        assert not worker.reason.startswith(stack_rules.JOB_WAIT), worker
    assert stack_rules.process_read(
        [Frame(n, f, ln) for f, n, ln in LOADER_WORKER],
        [Frame(n, f, ln) for f, n, ln in LOADER_WORKER]) is None


def test_a_wait_for_a_child_process_through_multiprocessing_is_no_job_wait():
    """Process.join with a timeout waits in multiprocessing.connection.wait: a child wait, not
    a read of a queue or a pipe."""
    join = [(f"{STDLIB}/selectors.py", "PollSelector.select", 416),
            (f"{STDLIB}/multiprocessing/connection.py", "wait", 947),
            (f"{STDLIB}/multiprocessing/popen_fork.py", "Popen.wait", 40),
            (f"{STDLIB}/multiprocessing/process.py", "BaseProcess.join", 149),
            (USER, "rebuild", 33)]
    assert stack_rules.process_read([Frame(n, f, ln) for f, n, ln in join], []) is None
    found = classify(threads(join), gpu_busy=False, source_line=no_source,
                     signals=HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.01,
                                         tree_cpu=0.01))
    assert found.reason.startswith(stack_rules.CHILD_WAIT), found


def test_a_dump_caught_at_a_sync_after_a_checkpoint_does_not_name_the_sync_as_the_checkpoint():
    """train_ckpt_every_n: the dump lands at `loss.item()` a second after save_checkpoint
    wrote 150 MB/s; the write-rate signal made that line the checkpoint, and the advice
    pointed at it, not at save_checkpoint (probe 144 F4). A line that saves while it syncs
    (`np.save(f, x.cpu().numpy())`) is still the checkpoint."""
    def on(line, **said):
        return classify(stack((USER, "train", 29)), gpu_busy=False,
                        source_line=lambda f: line, repeated_leaf=True,
                        signals=signals(write_per_s=150e6, main_thread_cpu=0.1,
                                        process_cpu=0.1, **said))
    sync = on("        total += loss.item()")
    assert sync.phase != "checkpoint", sync
    assert on("        total += loss.item()", gpu_busy=True).phase == "sync"
    assert on("    np.save(f, weights.cpu().numpy())").phase == "checkpoint"
    assert on("    pickle.dump(state.cpu(), f)").phase == "checkpoint"
