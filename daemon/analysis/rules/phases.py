"""Phase rules: a phase of the process's time (daemon.analysis.phases) past its threshold, with
the patch that fixes it (data wait, main-thread preprocessing, checkpoint, eval, host sync,
communication); and storage-bound input (I/O stalls while the GPU is low)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from daemon.analysis.phase_balance import NO_STACK_FILE
from daemon.analysis.rules.base import (
    Finding,
    Rule,
    patch_text,
    phase_samples,
    phase_share,
    phase_window_s,
    plural,
    process_evidence,
    program_words,
    share_savings,
    stack_evidence,
    where_in,
)
from daemon.analysis.rules.hung import hung_rank_ids
from daemon.analysis.rules.idle import waits_for_jobs
from daemon.analysis.rules.thresholds import (
    CHECKPOINT_SHARE,
    COMM_SHARE,
    COMPUTED_INPUT_SHARE,
    DATA_WAIT_SHARE,
    EVAL_SHARE,
    FED_BY_WORKERS_SHARE,
    GIL_BOUND_SHARE,
    GPU_LOW_FRACTION,
    HOST_PREPROCESS_SHARE,
    INPUT_READ_MIN_BYTES_PER_S,
    IO_STALL_FRACTION,
    MIN_PHASE_SAMPLES,
    SYNC_SHARE,
    WELL_USED_UTILIZATION_PCT,
)
from daemon.analysis.rules.window import Analysis, ProcessWindow
from daemon.analysis.stack_rules import (
    C_ON_CPU,
    PEER_WAIT,
    PYTHON_ON_CPU,
    WORKER_PROCESSES_FEED_IT,
    WORKS_ON_INPUT,
    name_matches,
    optimizer_step,
)
from daemon.clock import duration
from daemon.wire import CHECKPOINT, COMM, DATA_WAIT, EVAL, HOST_PREPROCESS, SYNC
from pricing.offer import HOURS_PER_MONTH

Patch = Callable[[ProcessWindow, Analysis, str, Sequence[Mapping[str, Any]]], str]


Headline = Callable[[ProcessWindow, Sequence[Mapping[str, Any]]], str]


def _phase_rule(phase: str, threshold: float, patch: Patch, what: str,
                headline: str | Headline) -> Callable[[Analysis, Rule], list[Finding]]:
    """`headline`: the advice in a few words, or what it is for the process and its phase's
    top stacks."""
    def check(a: Analysis, rule: Rule) -> list[Finding]:
        found = []
        hung = hung_rank_ids(a) if phase == COMM else set()
        for proc in a.processes:
            if phase == DATA_WAIT and (proc.kind.serves or waits_for_jobs(proc) is not None):
                continue  # a server waiting for requests, or a worker for jobs, is not starved
            if proc.id in hung:
                continue  # a hung job is not slow at communicating: hung_job says what it is
            share, stacks = phase_share(proc, phase)
            if share <= threshold or phase_samples(stacks) < MIN_PHASE_SAMPLES:
                continue
            if phase == DATA_WAIT and stacks and _optimizer_on_host(stacks):
                # Caught in its optimizer step (a thread of it in D state on a loaded host, as
                # probe 147's CPU Adam was): no input to prefetch; main_thread_preprocessing
                # advises on the step.
                continue
            said = headline if isinstance(headline, str) else headline(proc, stacks)
            fix = patch
            if phase == CHECKPOINT and _waits_for_saver(stacks):
                # It checkpoints asynchronously already. One wait for its saver (the last
                # save, joined at its end) is no stall that comes round: nothing to fix, and
                # no monthly saving. Waits that come round: its saver is behind.
                if len(proc.checkpoint_times) < 2:
                    continue
                said, fix = SAVER_BEHIND, _saver_behind_patch
            where = where_in(stacks) or "(no stack with a user frame yet)"
            savings, method = share_savings(proc, share, what)
            # The share is the phase balance's (/v1/now's `phases`), over the window it covers.
            covered = phase_window_s(proc)
            found.append(rule.make(
                proc.id,
                f"{proc.job} (pid {proc.pid}) spends {share:.0%} of its last "
                f"{duration(covered)} in {what}: {said} — {where}",
                savings, method,
                {**process_evidence(a, proc), "share": share, "phase_window_s": covered,
                 "top_stacks": stack_evidence(stacks), "where": where},
                {"kind": "show_patch", "file": where_in(stacks),
                 "text": patch_text(proc, where_in(stacks)),
                 "patch": fix(proc, a, where, stacks)},
                scope={"gpus": list(proc.gpus)},
                headline=f"{said} (pid {proc.pid}: {share:.0%} in {what})"))
        return found
    return check


def _workers(proc: ProcessWindow, a: Analysis) -> int:
    gpu_procs = max(len(a.processes), 1)
    return max(2, min(16, a.host_cpus // gpu_procs))


# A frame of PyTorch's data loading in a stack ("file:line function", phase_balance._stack).
_DATALOADER_FRAME = "torch/utils/data/"


def _waits_on_dataloader(stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the data wait's top stacks wait in a torch DataLoader (else on input the
    program reads itself: a file read on its loop, a reader thread of its own, a pool)."""
    return any(_DATALOADER_FRAME in str(frame) for stack in stacks
               for frame in stack.get("frames") or ())


def _data_wait_headline(proc: ProcessWindow, stacks: Sequence[Mapping[str, Any]]) -> str:
    if _waits_on_dataloader(stacks) or not stacks:
        return "prefetch in DataLoader workers"
    if _fed_by_workers(stacks):
        return "more worker processes, or faster ones"
    if _computes_input(proc, stacks):
        return ("its input is computed on the CPU: prepare the next batch during the GPU step, "
                "or make it cheaper")
    return "prefetch its input in parallel"


def _samples_where(stacks: Sequence[Mapping[str, Any]],
                   test: Callable[[Mapping[str, Any]], bool]) -> tuple[int, int]:
    """(samples of the stacks that pass `test`, all samples) of a phase's top stacks."""
    said = total = 0
    for stack in stacks:
        n = max(int(stack.get("samples") or 0), 1)
        total += n
        if test(stack):
            said += n
    return said, total


def _samples_saying(stacks: Sequence[Mapping[str, Any]], words: str) -> tuple[int, int]:
    """(samples whose reason says `words`, all samples) of a phase's top stacks: each stack
    counts by its reason (its most frequent)."""
    return _samples_where(stacks, lambda stack: words in str(stack.get("reason") or ""))


def _cpus_per(cpus: int, gpu_procs: int) -> str:
    """How a worker count was worked out, for the patch's comment: "32 CPUs / 1 GPU process"."""
    return f"{plural(cpus, 'CPU')} / {plural(gpu_procs, 'GPU process', 'GPU processes')}"


def _gil_bound(stacks: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(samples in which the thread feeding the waiting loop ran Python holding the GIL, all
    samples) of a data wait's top stacks, as phases._fed_by wrote their reasons. The thread's
    name, in the reason before WORKS_ON_INPUT, is cut to 40 characters and cannot spell the
    pair out (a source file's name after it could: that only turns its own process's advice to
    processes)."""
    return _samples_saying(stacks, f"{WORKS_ON_INPUT}{PYTHON_ON_CPU}")


def _computes_input(proc: ProcessWindow, stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the threads feeding the loop compute its input rather than read it: on a CPU
    (C_ON_CPU or PYTHON_ON_CPU after WORKS_ON_INPUT, as phases._fed_by wrote their reasons) in
    more than COMPUTED_INPUT_SHARE of its data wait's samples, while the process read less than
    INPUT_READ_MIN_BYTES_PER_S from storage: an augmentation on a pool of its own (probe 147
    M4), where a read-ahead reads nothing faster."""
    if _waits_on_dataloader(stacks) or proc.read_bytes_per_s >= INPUT_READ_MIN_BYTES_PER_S:
        return False
    on_cpu, sampled = _samples_where(stacks, lambda stack: any(
        f"{WORKS_ON_INPUT}{how}" in str(stack.get("reason") or "")
        for how in (C_ON_CPU, PYTHON_ON_CPU)))
    return on_cpu > sampled * COMPUTED_INPUT_SHARE


def _fed_by_workers(stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether worker processes make the input the loop waits for in most of its data wait's
    samples (WORKER_PROCESSES_FEED_IT in their reasons: a multiprocessing Pool's results, a
    multiprocessing queue or pipe its running children fill), not a DataLoader."""
    fed, sampled = _samples_saying(stacks, WORKER_PROCESSES_FEED_IT)
    return not _waits_on_dataloader(stacks) and fed > sampled * FED_BY_WORKERS_SHARE


# A frame of a multiprocessing Pool in a stack (phase_balance._stack's "file:line function"),
# and one where a loop waits for concurrent.futures results (of a ProcessPoolExecutor, where
# worker processes feed it).
_POOL_FRAME = "/multiprocessing/pool.py:"
_FUTURES_FRAME = "/concurrent/futures/"


def _worker_processes_patch(proc: ProcessWindow, a: Analysis, where: str,
                            stacks: Sequence[Mapping[str, Any]]) -> str:
    """The patch for a loop whose worker processes do not keep up (_fed_by_workers): more of
    them while the CPUs allow, a deeper queue, faster workers; never a thread pool."""
    n = _workers(proc, a)
    gpu_procs = max(len(a.processes), 1)
    frames = [str(frame) for stack in stacks for frame in stack.get("frames") or ()]
    pool = any(_POOL_FRAME in frame for frame in frames)
    executor = not pool and any(_FUTURES_FRAME in frame for frame in frames)
    # Seen from /proc alone (proc_phases: py-spy denied): no frame says how they hand it over.
    unread = not any(frame and not frame.startswith(NO_STACK_FILE) for frame in frames)
    has = proc.workers
    now = f" It has {plural(has, 'worker process', 'worker processes')} now." if has else ""
    how = ("a multiprocessing Pool" if pool else "a ProcessPoolExecutor" if executor
           else "its stack unread: a DataLoader's, a Pool's or its own" if unread
           else "through a multiprocessing queue")
    text = (f"# {where}: {program_words(proc)[1]} waits here for input its worker processes "
            f"make ({how}), and they cannot keep up.{now}\n"
            "# A thread pool would not help: the work already runs in processes.\n")
    if has >= n:
        text += (f"# More would not help either: {has} already share the {a.host_cpus} CPUs "
                 f"with {plural(gpu_procs, 'GPU process', 'GPU processes')}.\n")
    elif pool:
        text += ("# Run more of them:\n"
                 "-pool = multiprocessing.Pool(...)\n"
                 f"+pool = multiprocessing.Pool(processes={n})  # "
                 f"{_cpus_per(a.host_cpus, gpu_procs)}\n")
    elif executor:
        text += ("# Run more of them, with batches submitted ahead of the one the loop waits "
                 "for:\n"
                 "-pool = concurrent.futures.ProcessPoolExecutor(...)\n"
                 f"+pool = concurrent.futures.ProcessPoolExecutor(max_workers={n})  # "
                 f"{_cpus_per(a.host_cpus, gpu_procs)}\n")
    elif unread:
        text += (f"# Run more of them: {n} ({_cpus_per(a.host_cpus, gpu_procs)}), "
                 "as a DataLoader's num_workers, a Pool's processes or a ProcessPoolExecutor's "
                 "max_workers, with batches made ahead of the loop.\n")
    else:
        text += ("# Run more of them, and give them a deeper queue to fill ahead of the loop "
                 "(it evens out slow batches):\n"
                 f"+batches = multiprocessing.Queue(maxsize={4 * n})\n"
                 f"+for seed in range({n}):  # {_cpus_per(a.host_cpus, gpu_procs)}\n"
                 "+    multiprocessing.Process(target=make_batches, args=(batches, seed), "
                 "daemon=True).start()\n")
    busiest = next((s for s in proc.worker_stacks if s.get("file")), None)
    if busiest is not None:
        text += (f"# Make each faster: its workers spend the most samples at "
                 f"{busiest['file']}:{busiest.get('line')} "
                 f"({str(busiest.get('function')).split('.<locals>.', 1)[0]}); "
                 "numpy or decoding on the GPU do such work in a fraction of the time.\n")
    else:
        text += (f"# Make each faster: `py-spy top --pid {proc.pid} --subprocesses` shows "
                 "where its workers spend their time.\n")
    return text


def _computed_input_patch(proc: ProcessWindow, a: Analysis, where: str, n: int) -> str:
    """The patch for a loop whose own threads compute its input on the CPU (_computes_input):
    the work is CPU-bound, so reading ahead or another pool of threads (a smaller one than it
    may have) does nothing; overlapping it with the GPU step, cheaper work, the GPU, or more
    cores do."""
    gpu_procs = max(len(a.processes), 1)
    return (f"# {where}: {program_words(proc)[1]} waits here for input its own threads compute "
            f"on the CPU (decoding, augmenting), and it reads next to nothing from storage "
            f"({proc.read_bytes_per_s / 1e6:.1f} MB/s): the wait is CPU work, not a read.\n"
            "# A read-ahead would read nothing faster, and more threads share the same "
            f"{plural(a.host_cpus, 'CPU')}. Prepare the next batch while the GPU runs this "
            "one:\n"
            "+next_batch = pool.submit(make_batch, batch_ids[step + 1])  # runs during the GPU "
            "step\n"
            "+loss = train_step(batch)\n"
            "+batch = next_batch.result()\n"
            "# or a torch DataLoader over a Dataset that augments one item, ahead of the loop "
            f"in worker processes:\n# num_workers={n} ({_cpus_per(a.host_cpus, gpu_procs)}), "
            "pin_memory=True, prefetch_factor=4, persistent_workers=True.\n"
            "# Or make the work cheaper (fewer or simpler ops, smaller images, uint8 until the "
            "GPU), run it on the GPU (torchvision.transforms.v2 on CUDA tensors, DALI, "
            "Kornia), or give it more CPU cores.\n")


def _dataloader_patch(proc: ProcessWindow, a: Analysis, where: str,
                      stacks: Sequence[Mapping[str, Any]]) -> str:
    n = _workers(proc, a)
    loop = program_words(proc)[1]
    if stacks and _fed_by_workers(stacks):
        return _worker_processes_patch(proc, a, where, stacks)
    held, sampled = _gil_bound(stacks)
    if stacks and not _waits_on_dataloader(stacks) and held > sampled * GIL_BOUND_SHARE:
        return (f"# {where}: {loop} waits here for input a thread of its own makes in Python "
                "on a CPU.\n"
                "# Make it in worker processes, not threads: that thread runs Python holding "
                "the GIL, and threads take turns on it. E.g.\n"
                f"+pool = concurrent.futures.ProcessPoolExecutor(max_workers={n})\n"
                "+batches = pool.map(make_batch, batch_ids)  # made in parallel, ahead of the "
                "loop\n"
                "# or a torch DataLoader over a Dataset that makes one item in __getitem__, "
                f"with\n# num_workers={n}, pin_memory=True, prefetch_factor=4, "
                "persistent_workers=True.\n")
    if stacks and _computes_input(proc, stacks):
        return _computed_input_patch(proc, a, where, n)
    if stacks and not _waits_on_dataloader(stacks):
        return (f"# {where}: {loop} waits here for input it reads itself "
                "(on the loop's thread, or from a reader thread that cannot keep up).\n"
                "# Read ahead in parallel, threads will do (a read waits outside the GIL): "
                "several readers filling a bounded queue, e.g.\n"
                f"+pool = concurrent.futures.ThreadPoolExecutor(max_workers={n})\n"
                "+batches = pool.map(read_batch, batch_ids)  # reads run ahead of the loop\n"
                "# or a torch DataLoader over a Dataset that reads one item, with\n"
                f"# num_workers={n}, pin_memory=True, prefetch_factor=4, "
                "persistent_workers=True;\n"
                "# a slow source (network storage) also gains from larger reads or local "
                "NVMe.\n")
    return (f"# {where}: {loop} waits here for its DataLoader.\n"
            "# Where that DataLoader is built, prefetch in workers:\n"
            "-loader = DataLoader(dataset, batch_size=batch_size, ...)\n"
            f"+loader = DataLoader(dataset, batch_size=batch_size, ...,\n"
            f"+                    num_workers={n},  # "
            f"{_cpus_per(a.host_cpus, max(len(a.processes), 1))}\n"
            "+                    pin_memory=True,\n"
            "+                    prefetch_factor=4,\n"
            "+                    persistent_workers=True)\n")


# Frames of a model's step in PyTorch: a module's call machinery (Module._call_impl, a layer's
# forward) and autograd's backward (Tensor.backward, torch.autograd.backward).
_MODEL_STEP_PATHS = ("torch/nn/modules/", "torch/autograd/")
_MODEL_STEP_NAMES = ("forward", "backward")


def _in_model_step(frame: object) -> bool:
    """Whether a top stack's frame ("path:line name") is in a model's forward or backward pass:
    a function named `forward` or `backward` (a method's qualified name ends in `.forward`),
    or a frame of torch.nn's modules or of autograd."""
    location, _, name = str(frame).rpartition(" ")
    path = location.rpartition(":")[0].replace("\\", "/")
    return (name.rpartition(".")[2] in _MODEL_STEP_NAMES
            or any(part in path for part in _MODEL_STEP_PATHS))


def _launch_bound(stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether most of the host compute's samples run inside a model's forward or backward
    pass: Python dispatching its kernels one by one (a launch-bound model), not input
    preparation, which DataLoader workers could take over."""
    inside, sampled = _samples_where(
        stacks, lambda stack: any(_in_model_step(frame) for frame in stack.get("frames") or ()))
    return 2 * inside > sampled


def _in_optimizer_step(frame: object) -> bool:
    """Whether a top stack's frame ("path:line name") is in an optimizer step
    (stack_rules.optimizer_step: torch.optim, DeepSpeed's CPU Adam, a function named after an
    update rule such as `adam`)."""
    location, _, name = str(frame).rpartition(" ")
    return optimizer_step(location.rpartition(":")[0], name)


def _optimizer_on_host(stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether most of the host compute's samples run an optimizer step on the host (on the
    loop's thread, or on threads of its own it waits for): the optimizer offloaded to the CPU
    (ZeRO-offload's CPU Adam) or Python updating parameters, not input preparation."""
    inside, sampled = _samples_where(
        stacks, lambda stack: any(_in_optimizer_step(frame)
                                  for frame in stack.get("frames") or ()))
    return 2 * inside > sampled


OPTIMIZER_ON_HOST = ("the optimizer step runs on the CPU: overlap it with the next forward, or "
                     "keep the optimizer on the GPU")


def _preprocess_headline(proc: ProcessWindow, stacks: Sequence[Mapping[str, Any]]) -> str:
    if _optimizer_on_host(stacks):
        return OPTIMIZER_ON_HOST
    return ("fewer, larger kernels: CUDA graphs or torch.compile" if _launch_bound(stacks)
            else "move it into DataLoader workers")


def _preprocess_patch(proc: ProcessWindow, a: Analysis, where: str,
                      stacks: Sequence[Mapping[str, Any]]) -> str:
    loop = program_words(proc)[1]
    if _optimizer_on_host(stacks):
        return (f"# {where}: {loop} spends this time in its optimizer step on the host (an "
                "optimizer offloaded to the CPU, as ZeRO-offload's, or Python updating the "
                "parameters), while the GPU waits for the updated parameters.\n"
                "# No DataLoader worker can take that over: it is the step itself, not its "
                "input.\n"
                "# Overlap it with the next forward: update on a thread while the GPU runs the "
                "next step on the parameters it has (one step stale: ZeRO-offload's delayed "
                "parameter update), e.g.\n"
                "+update = pool.submit(cpu_optimizer_step, grads)  # runs during the next "
                "forward\n"
                "+loss = model(next_batch); loss.backward()\n"
                "+update.result()  # then copy the new parameters to the GPU\n"
                "# or a vectorized CPU optimizer on all cores: DeepSpeed's DeepSpeedCPUAdam "
                "(zero_optimization.offload_optimizer: {\"device\": \"cpu\", "
                "\"pin_memory\": true});\n"
                "# or keep the optimizer on the GPU if its state fits (Adam: 2 floats per "
                "parameter), fused into a few kernels:\n"
                "+optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n")
    if _launch_bound(stacks):
        return (f"# {where}: {loop} spends this time in the model's forward or backward "
                "pass, launching its many small GPU kernels one by one from Python while the "
                "GPU waits between them.\n"
                "# No DataLoader worker can take that over: launch fewer, larger kernels.\n"
                "+model = torch.compile(model, mode=\"reduce-overhead\")  # fuses ops, replays "
                "the step as a CUDA graph\n"
                "# or capture the step yourself over static input tensors:\n"
                "+graph = torch.cuda.CUDAGraph()\n"
                "+with torch.cuda.graph(graph):\n"
                "+    static_out = model(static_in)\n"
                "+...  # each step: static_in.copy_(batch); graph.replay()\n"
                "# or a larger batch: the same launches then do more work each.\n")
    n = _workers(proc, a)
    return (f"# {where}: decoding/augmentation runs in {loop}'s process.\n"
            "# Move it into Dataset.__getitem__ (or a transform) and let workers run it:\n"
            f"+loader = DataLoader(dataset, ..., num_workers={n}, pin_memory=True,\n"
            "+                    prefetch_factor=4, persistent_workers=True)\n"
            "# GPU-friendly decoding (torchvision.io.decode_jpeg(device='cuda'), DALI) moves it "
            "off the CPU entirely.\n"
            "# Work on the model's outputs (metrics, logging) cannot go to workers: do it every "
            "N steps, on the GPU, or on a thread.\n")


def _checkpoint_patch(proc: ProcessWindow, a: Analysis, where: str,
                      stacks: Sequence[Mapping[str, Any]]) -> str:
    cadence = proc.checkpoint_interval_s
    # The one cadence (ProcessWindow.checkpoint_interval_s) in the one format spot_training uses.
    every = f" (now every {duration(cadence)})" if cadence else ""
    return (f"# {where}: training stops while the checkpoint is written{every}.\n"
            "-torch.save(state, path)\n"
            "+import torch.distributed.checkpoint as dcp\n"
            "+future = dcp.async_save(state_dict, checkpoint_id=path)  # copy to CPU, write "
            "in the background\n"
            "+# ... before the next save: future.result()\n"
            "# Or save less often: the interval only needs to bound the work lost to a crash.\n")


# Where a checkpoint phase's main thread waits for a save running elsewhere: a saver thread's
# join, or the future of an asynchronous save (torch.distributed.checkpoint.async_save's is a
# concurrent.futures one). (file, function) globs, as stack_rules matches frames.
_SAVER_WAITS = (
    ("*/threading.py", "Thread.join"),
    ("*/threading.py", "*._wait_for_tstate_lock"),
    ("*/concurrent/futures/_base.py", "Future.result"),
    ("*/concurrent/futures/_base.py", "wait"),
)
SAVER_BEHIND = "its saver is still writing when the next save is due: checkpoint less often"


def _is_saver_wait(frame: object) -> bool:
    """Whether a top stack's frame ("path:line name") is one of _SAVER_WAITS."""
    location, _, name = str(frame).rpartition(" ")
    path = location.rpartition(":")[0].replace("\\", "/")
    return any(fnmatchcase(path, file) and name_matches(name, function)
               for file, function in _SAVER_WAITS)


def _waits_for_saver(stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether most of a checkpoint phase's samples wait for a save that runs elsewhere (a
    saver thread, an asynchronous save's future) rather than write on the loop's thread:
    the program checkpoints asynchronously already."""
    waits = sampled = 0
    for stack in stacks:
        n = max(int(stack.get("samples") or 0), 1)
        sampled += n
        if any(_is_saver_wait(frame) for frame in stack.get("frames") or ()):
            waits += n
    return waits * 2 > sampled


def _saver_behind_patch(proc: ProcessWindow, a: Analysis, where: str,
                        stacks: Sequence[Mapping[str, Any]]) -> str:
    cadence = proc.checkpoint_interval_s
    every = f" (now every {duration(cadence)})" if cadence else ""
    return (f"# {where}: {program_words(proc)[1]} waits here for its saver to finish a "
            f"checkpoint{every}: it saves in the background already, but each save is not "
            "done when the next is due (or is joined as soon as it starts).\n"
            "# Join it only before the next save, and save less often than a save takes:\n"
            "+if step % save_every == 0:  # save_every: more steps than a save takes\n"
            "+    if saver is not None:\n"
            "+        saver.join()  # (the last one is done by now)\n"
            "+    saver = threading.Thread(target=save, args=(state, path))\n"
            "+    saver.start()\n"
            "# Or make each save faster: write to local disk, then copy to remote storage.\n")


def _eval_patch(proc: ProcessWindow, a: Analysis, where: str,
                stacks: Sequence[Mapping[str, Any]]) -> str:
    return (f"# {where}: evaluation takes a large part of the run.\n"
            "# Evaluate less often or on a fixed subset, e.g. HF TrainingArguments:\n"
            "+eval_steps=5 * current_eval_steps, eval_accumulation_steps=..., "
            "per_device_eval_batch_size=2 * train batch\n"
            "# Lightning: Trainer(val_check_interval=..., limit_val_batches=0.25)\n"
            "# Or run eval as a separate job on a cheaper GPU from saved checkpoints.\n")


def _sync_patch(proc: ProcessWindow, a: Analysis, where: str,
                stacks: Sequence[Mapping[str, Any]]) -> str:
    return (f"# {where}: the loop waits for the GPU here (.item(), .cpu(), print of a tensor, "
            "torch.cuda.synchronize()).\n"
            "-total_loss += loss.item()\n"
            "+total_loss += loss.detach()          # stays on the GPU\n"
            "+if step % log_every == 0:\n"
            "+    log(total_loss.item() / log_every)  # one sync per log_every steps\n")


def _waits_for_peers(stacks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether most of the comm time's samples wait on a socket for a peer of the process's own
    job (phases._waits_for_peer: a hand-written exchange between ranks), not in a library's
    collective (NCCL, gloo, MPI), where DDP's buckets and NCCL's transport are the knobs."""
    said, total = _samples_saying(stacks, PEER_WAIT)
    return total > 0 and 2 * said > total


def _comm_headline(proc: ProcessWindow, stacks: Sequence[Mapping[str, Any]]) -> str:
    return ("find the slow peer, then overlap the exchange" if _waits_for_peers(stacks)
            else "overlap and bucket collectives")


def _comm_patch(proc: ProcessWindow, a: Analysis, where: str,
                stacks: Sequence[Mapping[str, Any]]) -> str:
    if _waits_for_peers(stacks):
        return (f"# {where}: this rank waits on a socket for a peer of its own job (an "
                "exchange of its own, not a library's collective).\n"
                "# Its wait is its slowest peer's work: find that rank first (the job's "
                "`straggler`\n# recommendation names it and its line; or `py-spy dump --pid "
                "PEER`), and make it faster.\n"
                "# Then overlap the exchange with compute, e.g. on a thread:\n"
                "+exchange = threading.Thread(target=exchange_grads, args=(grads,))\n"
                "+exchange.start()\n"
                "+...  # the next micro-batch's forward and backward\n"
                "+exchange.join()\n"
                "# or use torch.distributed's collectives (NCCL over NVLink/EFA), which can "
                "overlap:\n"
                "+work = dist.all_reduce(grads, async_op=True)  # ...; work.wait()\n")
    return (f"# {where}: collectives (all-reduce/all-gather) block compute.\n"
            "# Overlap and batch communication:\n"
            "+model = DDP(model, bucket_cap_mb=100, gradient_as_bucket_view=True)\n"
            "+with model.no_sync():  # accumulate k micro-batches, all-reduce once\n"
            "+    loss.backward()\n"
            "# Check NCCL uses NVLink/EFA: NCCL_DEBUG=INFO (look for 'via P2P/IPC' / 'NET/OFI').\n")


def check_storage_bound(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    for proc in a.processes:
        stall = max(proc.iowait_fraction, proc.d_state_fraction)
        if stall <= IO_STALL_FRACTION or proc.gpu_low_fraction <= GPU_LOW_FRACTION:
            continue
        share_dw, stacks_dw = phase_share(proc, DATA_WAIT)
        share_pp, stacks_pp = phase_share(proc, HOST_PREPROCESS)
        stacks = stacks_dw + stacks_pp
        share = min(proc.gpu_low_fraction, 1.0)
        savings, method = share_savings(proc, share, "I/O-starved low GPU use")
        where = where_in(stacks) or "the input pipeline"
        found.append(rule.make(
            proc.id,
            f"{proc.job} (pid {proc.pid}) is storage-bound: over its last "
            f"{duration(proc.seconds)} I/O stalls {stall:.0%} of the time while its GPU is "
            f"below {WELL_USED_UTILIZATION_PCT:g}% {proc.gpu_low_fraction:.0%} of the time — "
            f"stage the data on local NVMe ({where})",
            savings, method,
            {**process_evidence(a, proc), "iowait_fraction": proc.iowait_fraction,
             "d_state_fraction": proc.d_state_fraction,
             "read_bytes_per_s": proc.read_bytes_per_s,
             "gpu_low_fraction": proc.gpu_low_fraction,
             "data_wait_share": share_dw, "host_preprocess_share": share_pp,
             "top_stacks": stack_evidence(stacks)},
            {"kind": "copy_commands", "commands": [
                "lsblk -d -o NAME,SIZE,MODEL,MOUNTPOINT | grep -i nvme  # find the local disk",
                "sudo mkfs.xfs /dev/nvme1n1 && sudo mkdir -p /mnt/nvme && "
                "sudo mount /dev/nvme1n1 /mnt/nvme  # instance store: data is lost on stop",
                "rsync -a --info=progress2 <dataset dir> /mnt/nvme/",
                "# then point the dataset path at /mnt/nvme/...",
            ]}, scope={"gpus": list(proc.gpus)},
            headline=f"stage the data on local NVMe (pid {proc.pid}: I/O stalls {stall:.0%})"))
    return found


DATALOADER_STARVATION = Rule(
    "dataloader_starvation", "data_wait share of the window",
    f"> {DATA_WAIT_SHARE:.0%} (PyTorch profiler)", "phase share, DataLoader top stacks",
    "prefetch: num_workers, pin_memory, prefetch_factor, persistent_workers; input computed "
    "on the CPU: the next batch during the GPU step, cheaper work",
    f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(DATA_WAIT, DATA_WAIT_SHARE, _dataloader_patch, "data wait",
                _data_wait_headline))
MAIN_THREAD_PREPROCESSING = Rule(
    "main_thread_preprocessing", "host_preprocess share of the window",
    f"> {HOST_PREPROCESS_SHARE:.0%} (PyTorch profiler)", "phase share, top stacks",
    "move preprocessing into DataLoader workers; in a model's forward or backward, CUDA "
    "graphs or torch.compile; in an optimizer step on the host, overlap it with the next "
    "forward or keep the optimizer on the GPU", f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(HOST_PREPROCESS, HOST_PREPROCESS_SHARE, _preprocess_patch,
                "main-thread preprocessing", _preprocess_headline))
STORAGE_BOUND = Rule(
    "storage_bound", "iowait / D-state fraction while the GPU is low",
    f"> {IO_STALL_FRACTION:.0%} stalled and > {GPU_LOW_FRACTION:.0%} GPU-low "
    "(SageMaker IOBottleneck)", "iowait, D state, read rate, top stacks",
    "stage the data on local NVMe", f"process burn x GPU-low fraction x {HOURS_PER_MONTH:g} h",
    check_storage_bound)
BLOCKING_CHECKPOINT = Rule(
    "blocking_checkpoint", "checkpoint share of the window",
    f"> {CHECKPOINT_SHARE:.0%}", "phase share, checkpoint cadence, top stacks",
    "async checkpointing, or checkpoint less often",
    f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(CHECKPOINT, CHECKPOINT_SHARE, _checkpoint_patch, "checkpointing",
                "checkpoint asynchronously or less often"))
EVAL_DOMINATING = Rule(
    "eval_dominating", "eval share of the window", f"> {EVAL_SHARE:.0%}",
    "phase share, top stacks", "evaluate less often / on a subset",
    f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(EVAL, EVAL_SHARE, _eval_patch, "evaluation",
                "evaluate less often or on a subset"))
HOST_SYNC = Rule(
    "host_sync", "sync share of the window", f"> {SYNC_SHARE:.0%}",
    "phase share, the repeating user line", "remove host syncs from the loop",
    f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(SYNC, SYNC_SHARE, _sync_patch, "host-GPU syncs",
                "keep values on the GPU, sync only when logging"))
COMMUNICATION_BOUND = Rule(
    "communication_bound", "comm share of the window", f"> {COMM_SHARE:.0%}",
    "phase share, collective top stacks", "overlap / bucket communication",
    f"process burn x share x {HOURS_PER_MONTH:g} h",
    _phase_rule(COMM, COMM_SHARE, _comm_patch, "communication", _comm_headline))
