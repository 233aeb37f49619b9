"""A recommendation's headline, figures, evidence and action agree with each other, with the
other recommendations on the same screen and with the panels (/v1/now's phases): the demo
showed "(now every 0 min)" beside "checkpoints every 7 s", a server offered "a patch for your
training script", and "spends 80%" beside a phase balance of 83%."""

import re

from daemon.analysis.host_signals import HostSignals
from daemon.analysis.kinds import BATCH_INFERENCE, ONLINE_INFERENCE, TRAINING, Kind
from daemon.analysis.phase_balance import StackSample, phase_balance
from daemon.analysis.phases import classify
from daemon.analysis.proc_phases import classify_from_proc
from daemon.analysis.proc_phases import where as proc_where
from daemon.api.actions import apply
from daemon.clock import duration
from daemon.sources.frames import Frame, ThreadStack
from daemon.sources.proc_state import ProcFacts
from daemon.sources.sample import ProcessSample, Sample
from daemon.sources.stacks import stack_hash
from tests.daemon.test_rules import by_rule, phases_for, pid_id, recs, window


def kinds(samples, kind):
    return {pid_id(samples): Kind(kind, 0.8, ("test",))}


def checkpointing_every_7s():
    """(blocking_checkpoint, spot_training) of a training job that checkpoints every 7 s, 45%
    of a 600 s window (the process started 660 s before its end)."""
    s = window(n=61, step=10.0)
    every_7s = [s[0].ts + 7.0 * k for k in range(80)]
    found = recs(s, phases_for(s, checkpoint=0.45, compute=0.55),
                 checkpoint_times={pid_id(s): every_7s}, kinds=kinds(s, TRAINING),
                 limits={"spot_min_runtime_s": 60.0})
    [blocking] = by_rule(found, "blocking_checkpoint")
    [spot] = by_rule(found, "spot_training")
    return blocking, spot


def test_checkpoint_cadence_is_one_figure_in_one_format_in_both_rules():
    blocking, spot = checkpointing_every_7s()
    assert "checkpoints every 7 s" in spot.summary
    assert "(now every 7 s)" in blocking.action["patch"]
    assert "0 min" not in blocking.action["patch"]
    assert blocking.evidence["phases"]["checkpoint"]["share"] == 0.45
    assert spot.evidence["checkpoint_interval_s"] == 7.0


def test_duration_never_rounds_a_short_interval_to_nothing():
    assert duration(0.4) == "0.4 s" and duration(7) == "7 s" and duration(420) == "7 min"
    assert duration(9000) == "2.5 h"
    assert duration(86400) == "24.0 h" and duration(30 * 86400) == "30 days"  # (the review's)


def test_a_servers_dry_run_speaks_of_the_server_and_a_batch_jobs_of_its_script():
    served = window(utils=[90.0] + [0.0] * 7, sm_activity=10.0, command="python app.py")
    [rec] = by_rule(recs(served, kinds=kinds(served, ONLINE_INFERENCE)),
                    "underbatched_inference")
    assert "(90% utilization over its last 10 min)" in rec.summary  # its window, not now's
    assert rec.summary.endswith("batch requests dynamically")
    result = apply(rec.as_dict())
    assert "training" not in result.message and "server" in result.message
    assert "max-num-seqs" in result.patch
    [batch] = by_rule(recs(served, kinds=kinds(served, BATCH_INFERENCE)),
                      "underbatched_inference")
    assert batch.summary.endswith("give each forward pass a larger batch")
    result = apply(batch.as_dict())
    assert "inference script" in result.message and "batch_size" in result.patch
    assert "dynamic_batching" not in result.patch


def test_a_phase_patch_names_the_workload_by_its_kind():
    s = window()
    [server] = by_rule(recs(s, phases_for(s, host_preprocess=0.4), kinds=kinds(s, ONLINE_INFERENCE)),
                       "main_thread_preprocessing")
    message = apply(server.as_dict()).message
    assert "training" not in message and "restart the server" in message
    assert "training" not in server.action["patch"]
    [trainer] = by_rule(recs(s, phases_for(s, data_wait=0.4), kinds=kinds(s, TRAINING)),
                        "dataloader_starvation")
    assert "training loop waits" in trainer.action["patch"]


def test_an_old_document_without_a_text_assumes_no_kind():
    result = apply({"id": "x", "action": {"kind": "show_patch", "file": None, "patch": "+x"}})
    assert "training" not in result.message


def test_a_phase_headline_quotes_the_phase_balance_and_its_window():
    s = window()
    phases = phases_for(s, data_wait=0.834, compute=0.166)  # 600 s of the process's time
    [rec] = by_rule(recs(s, phases), "dataloader_starvation")
    shown = f"{phases[pid_id(s)]['data_wait']['share']:.0%}"  # the details screen's format
    assert re.search(rf"spends {shown} of its last 10 min in data wait", rec.summary)
    assert rec.evidence["phase_window_s"] == 600.0


def test_a_data_wait_outside_a_dataloader_is_told_to_read_ahead_not_to_tune_a_dataloader():
    """A loop that reads its own files, or waits on a reader thread of its own (its top stack
    the reader's line), has no DataLoader whose workers to raise: 'waits here for its
    DataLoader' was wrong there."""
    s = window()
    phases = phases_for(s, data_wait=0.834, compute=0.166)
    for stack in phases[pid_id(s)]["data_wait"]["top_stacks"]:
        stack["frames"] = ["/srv/train.py:23 read_batches", "/usr/lib/python3.11/threading.py"
                           ":975 Thread.run"]
    [own] = by_rule(recs(s, phases), "dataloader_starvation")
    assert own.headline.startswith("prefetch its input in parallel (pid ")
    assert "in data wait: prefetch its input in parallel — /srv/train.py:88" in own.summary
    patch = own.action["patch"]
    assert "waits here for input it reads itself" in patch and "ThreadPoolExecutor" in patch
    assert "waits here for its DataLoader" not in patch
    [loader] = by_rule(recs(s, phases_for(s, data_wait=0.834, compute=0.166)),
                       "dataloader_starvation")  # its stack in a DataLoader: tune that
    assert loader.headline.startswith("prefetch in DataLoader workers")
    assert "waits here for its DataLoader" in loader.action["patch"]


STDLIB = "/usr/lib/python3.11"
THREAD_RUN = (Frame("Thread.run", f"{STDLIB}/threading.py", 982),
              Frame("Thread._bootstrap_inner", f"{STDLIB}/threading.py", 1045))
# A loop in a queue.SimpleQueue's get (C: its line only), as py-spy dumps it (Python 3.11).
LOOP = ThreadStack(1, "MainThread", False, (Frame("train", "/srv/train.py", 57),))
# A producer thread decoding and augmenting in Python (tests/daemon/workloads/augment_pipeline.py)
AUGMENTING = (Frame("Random.gauss", f"{STDLIB}/random.py", 597),
              Frame("augment.<locals>.<listcomp>.<listcomp>", "/srv/augment.py", 31),
              Frame("augment.<locals>.<listcomp>", "/srv/augment.py", 31),
              Frame("augment", "/srv/augment.py", 31), Frame("produce", "/srv/augment.py", 41),
              *THREAD_RUN)
# A reader thread in a file's read (FileIO.read is C: its line only).
READING = (Frame("read_batches", "/srv/reader.py", 23), *THREAD_RUN)
SOURCE = {"train": "batch = batches.get()", "read_batches": "raw = shard.read(CHUNK)"}


def data_wait_of(s, dumps, signals=None, pid=42, phase="data_wait"):
    """The process's phase balance from its dumps (each a list of ThreadStacks), classified and
    tallied as the daemon does (all in `phase`): the sample keeps the stack of the thread the
    loop waits for."""
    samples = []
    for i, dump in enumerate(dumps):
        said = classify(dump, gpu_busy=False, source_line=lambda f: SOURCE.get(f.name),
                        signals=signals)
        shown = said.thread or dump[0]
        samples.append(StackSample(s[0].ts + i, pid, shown.thread_id, stack_hash(shown.frames),
                                   shown.frames, said.phase, 1.0, said.reason))
    balance = phase_balance(samples, 600.0, 0.0)
    assert set(balance) == {phase}, balance
    return {pid_id(s): balance}


def producers(*gil: bool, frames: tuple[Frame, ...] = AUGMENTING) -> list[ThreadStack]:
    """The loop and Python producers, all active (py-spy calls one waiting for the GIL active
    too); `gil`: which of them holds it."""
    return [LOOP, *(ThreadStack(2 + i, f"producer-{i}", True, frames, owns_gil=held)
                    for i, held in enumerate(gil))]


def test_a_loop_starved_by_python_producer_threads_is_told_processes_not_threads():
    """Producer threads decode and augment in Python: the GIL lets one run at a time, so a
    ThreadPoolExecutor, which the patch offered, adds threads that take turns; worker processes
    run in parallel. The patch says so, and why."""
    s = window()
    # py-spy saw one producer holding the GIL in 9 dumps of 10 (it misses it now and then)
    dumps = [producers(False, True)] * 5 + [producers(True, False)] * 4 + [producers(False, False)]
    [rec] = by_rule(recs(s, data_wait_of(s, dumps)), "dataloader_starvation")
    patch = rec.action["patch"]
    assert rec.evidence["where"].startswith("/srv/augment.py:31"), rec.evidence["where"]
    assert "ProcessPoolExecutor(max_workers=" in patch and "num_workers=" in patch, patch
    assert "ThreadPoolExecutor" not in patch, patch
    assert "not threads: that thread runs Python holding the GIL, and threads take turns on " \
        "it" in patch, patch


def test_a_loop_starved_by_a_reader_thread_waiting_on_io_is_told_threads():
    """A reader thread in a file's read waits outside the GIL: threads read in parallel. So
    does a producer in C code that released the GIL, and one seen holding it in too few
    samples to say."""
    s = window()
    reader = [LOOP, ThreadStack(2, "reader", True, READING, owns_gil=True)]
    [rec] = by_rule(recs(s, data_wait_of(s, [reader] * 10)), "dataloader_starvation")
    patch = rec.action["patch"]
    assert rec.evidence["top_stacks"][0]["reason"].endswith(
        "reading a file or socket: `raw = shard.read(CHUNK)` (reader.py:23 read_batches)")
    assert "ThreadPoolExecutor(max_workers=" in patch, patch
    assert "threads will do (a read waits outside the GIL)" in patch, patch
    assert "ProcessPoolExecutor" not in patch
    # no GIL held (C code that released it: zlib, a large numpy op); held in 3 samples of 10:
    # a loop that reads its input (5 MB/s from storage) and decompresses it
    reads = window(proc_kw=lambda i: {"read_bytes": i * 10 * 5_000_000})
    for dumps in ([producers(False, False)] * 10,
                  [producers(False, True)] * 3
                  + [producers(False, False, frames=AUGMENTING[1:])] * 7):
        [rec] = by_rule(recs(reads, data_wait_of(reads, dumps)), "dataloader_starvation")
        assert "ThreadPoolExecutor" in rec.action["patch"], rec.action["patch"]
        assert rec.headline.startswith("prefetch its input in parallel"), rec.headline


PROBE = "/work/probe147/progs"
FUTURES = f"{STDLIB}/concurrent/futures"
POOL_THREAD = (Frame("_WorkItem.run", f"{FUTURES}/thread.py", 58),
               Frame("_worker", f"{FUTURES}/thread.py", 83), *THREAD_RUN)
# Probe 147's trainer_threads.py --starved as py-spy dumped it (Python 3.11): the loop in
# pool.map's iterator, waiting for its 32-thread pool's augmentation (numpy, no GIL held).
POOL_MAP_LOOP = ThreadStack(1, "MainThread", False, (
    Frame("Condition.wait", f"{STDLIB}/threading.py", 327),
    Frame("Future.result", f"{FUTURES}/_base.py", 451),
    Frame("_result_or_cancel", f"{FUTURES}/_base.py", 317),
    Frame("Executor.map.<locals>.result_iterator", f"{FUTURES}/_base.py", 619),
    Frame("main", f"{PROBE}/trainer_threads.py", 56),
    Frame("<module>", f"{PROBE}/trainer_threads.py", 66)))


def intraop(n: int, line: int) -> ThreadStack:
    return ThreadStack(2 + n, f"intraop_{n}", True,
                       (Frame("augment", f"{PROBE}/trainer_threads.py", line), *POOL_THREAD),
                       owns_gil=False)


def test_a_loop_starved_by_its_own_augmenting_pool_is_told_the_work_is_cpu_not_a_read():
    """Probe 147 M4: a host augmentation on a 32-thread pool (numpy, the GIL released), the
    loop reading 0 bytes, was told "input it reads itself … threads will do (a read waits
    outside the GIL)" with ThreadPoolExecutor(max_workers=2): it reads nothing, and that pool
    is smaller than its own. Its threads compute: prepare the next batch during the GPU step,
    make it cheaper or move it to the GPU, or more cores; no read-ahead, no pool of 2."""
    s = window()
    dumps = [[POOL_MAP_LOOP, *(intraop(n, 17 + (k + n) % 3) for n in range(32))]
             for k in range(10)]
    [rec] = by_rule(recs(s, data_wait_of(s, dumps)), "dataloader_starvation")
    assert rec.evidence["where"].startswith(f"{PROBE}/trainer_threads.py:1"), rec.evidence
    assert rec.headline.startswith("its input is computed on the CPU: prepare the next batch "
                                   "during the GPU step, or make it cheaper"), rec.headline
    patch = rec.action["patch"]
    assert "input its own threads compute on the CPU" in patch, patch
    assert "reads next to nothing from storage (0.0 MB/s)" in patch, patch
    assert "ThreadPoolExecutor" not in patch and "reads itself" not in patch, patch
    assert "Read ahead" not in patch and "max_workers" not in patch, patch
    assert "while the GPU runs this one" in patch and "on the GPU" in patch, patch
    assert "more CPU cores" in patch, patch


# Probe 147's offload_train.py (ZeRO-offload-like) as py-spy dumped it: the loop in
# `f.result()` for the 3 cpu_adam threads' Adam over their shards (numpy, the GIL released).
RESULT_LOOP = ThreadStack(1, "MainThread", False, (
    Frame("Condition.wait", f"{STDLIB}/threading.py", 327),
    Frame("Future.result", f"{FUTURES}/_base.py", 451),
    Frame("main", f"{PROBE}/offload_train.py", 37),
    Frame("<module>", f"{PROBE}/offload_train.py", 43)))


def cpu_adam(n: int, line: int) -> ThreadStack:
    return ThreadStack(2 + n, f"cpu_adam_{n}", True,
                       (Frame("adam", f"{PROBE}/offload_train.py", line), *POOL_THREAD),
                       owns_gil=False)


def test_a_loop_waiting_for_its_cpu_adam_threads_is_told_the_optimizer_step_not_prefetch():
    """Probe 147 M3b: the loop waits in `f.result()` for threads running Adam on its shards;
    a working thread read as work on its input, and the data wait got "prefetch its input in
    parallel". Those threads update parameters after the step: host compute of the step, and
    main_thread_preprocessing says so (overlap the CPU optimizer step with the next forward,
    or keep it on the GPU), with no DataLoader and no data wait."""
    s = window()
    dumps = [[RESULT_LOOP, *(cpu_adam(n, 17 + (k + n) % 4) for n in range(3))]
             for k in range(10)]
    phases = data_wait_of(s, dumps, phase="host_preprocess")
    top = phases[pid_id(s)]["host_preprocess"]["top_stacks"][0]
    assert "runs the optimizer step on a CPU" in top["reason"], top
    found = recs(s, phases)
    assert by_rule(found, "dataloader_starvation") == []
    [rec] = by_rule(found, "main_thread_preprocessing")
    assert rec.headline.startswith("the optimizer step runs on the CPU: overlap it with the "
                                   "next forward, or keep the optimizer on the GPU"), rec.headline
    patch = rec.action["patch"]
    assert "optimizer step on the host" in patch and "delayed parameter update" in patch, patch
    assert "DeepSpeedCPUAdam" in patch and "fused=True" in patch, patch
    assert "DataLoader(" not in patch and "num_workers" not in patch, patch


# As py-spy dumped them (Python 3.11): the loop of tests/daemon/workloads/decode_processes.py in
# its multiprocessing.Queue's get, which its decoder processes fill, ...
MP_QUEUE_LOOP = ThreadStack(1, "MainThread", False, (
    Frame("Connection._recv", f"{STDLIB}/multiprocessing/connection.py", 395),
    Frame("Connection._recv_bytes", f"{STDLIB}/multiprocessing/connection.py", 430),
    Frame("_ConnectionBase.recv_bytes", f"{STDLIB}/multiprocessing/connection.py", 216),
    Frame("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 103),
    Frame("main", "/srv/decode_processes.py", 48),
    Frame("<module>", "/srv/decode_processes.py", 53)))
# ... with its two decoders on a CPU: 1.9 cores between them, the loop's own 2%
DECODING = HostSignals(seconds=3.0, main_thread_cpu=0.0, process_cpu=0.02, tree_cpu=1.92,
                       children_running=2)
# the loop of tests/daemon/workloads/pool_loader.py in its Pool's imap, beside the Pool's threads
POOL_THREAD = (Frame("Pool._handle_results", f"{STDLIB}/multiprocessing/pool.py", 579),
               *THREAD_RUN)
POOL_LOOP = [
    ThreadStack(1, "MainThread", False, (
        Frame("Condition.wait", f"{STDLIB}/threading.py", 327),
        Frame("IMapIterator.next", f"{STDLIB}/multiprocessing/pool.py", 861),
        Frame("main", "/srv/pool_loader.py", 24), Frame("<module>", "/srv/pool_loader.py", 29))),
    ThreadStack(3, "Thread-3 (_handle_results)", False, (
        Frame("Connection._recv", f"{STDLIB}/multiprocessing/connection.py", 395),
        *POOL_THREAD))]
# and one of its Pool's workers (a forked child: its parent's frames below its own), decoding
POOL_WORKER = [ThreadStack(7, "MainThread", True, (
    Frame("decode", "/srv/pool_loader.py", 16),
    Frame("worker", f"{STDLIB}/multiprocessing/pool.py", 125),
    Frame("BaseProcess.run", f"{STDLIB}/multiprocessing/process.py", 108),
    Frame("BaseProcess._bootstrap", f"{STDLIB}/multiprocessing/process.py", 314),
    Frame("main", "/srv/pool_loader.py", 21), Frame("<module>", "/srv/pool_loader.py", 29)),
    owns_gil=True)]


def with_children(s, *commands):
    """The window `s` with children of its process (pid 42): one per command."""
    kids = tuple(ProcessSample(50 + i, 1.0, 42, "ann", command)
                 for i, command in enumerate(commands))
    return [Sample(x.ts, x.tick, x.gpus, x.processes + kids) for x in s]


def test_a_loop_fed_by_decoder_processes_is_told_more_or_faster_processes_not_threads():
    """Its decoder processes fill a multiprocessing.Queue too slowly: it was told to read its
    input itself ahead with a ThreadPoolExecutor ("input it reads itself"), which the work,
    already in processes, does not need. Now: how many workers it has, more of them up to the
    CPUs, a deeper queue, and how to see where the workers spend their time (the daemon does
    not dump the children of a loop on a multiprocessing queue)."""
    s = with_children(window(), "python decode.py", "python decode.py",
                      "python -c from multiprocessing.resource_tracker import main;main(5)")
    [rec] = by_rule(recs(s, data_wait_of(s, [[MP_QUEUE_LOOP]] * 10, DECODING)),
                    "dataloader_starvation")
    assert rec.evidence["where"] == "/srv/decode_processes.py:48", rec.evidence["where"]
    assert rec.headline.startswith("more worker processes, or faster ones (pid 42: "), \
        rec.headline
    assert "in data wait: more worker processes, or faster ones — /srv/decode_processes" \
        ".py:48" in rec.summary, rec.summary
    patch = rec.action["patch"]
    assert "ThreadPoolExecutor" not in patch and "reads itself" not in patch, patch
    assert "through a multiprocessing queue), and they cannot keep up. It has 2 worker " \
        "processes now." in patch, patch  # the resource tracker is none of them
    # 32 CPUs, one GPU process: 16 (the most _workers offers)
    assert "+batches = multiprocessing.Queue(maxsize=64)" in patch, patch
    assert "+for seed in range(16):" in patch and "multiprocessing.Process(" in patch, patch
    assert "`py-spy top --pid 42 --subprocesses`" in patch, patch
    # as many workers as it gets CPUs: more would not help
    crowded = with_children(window(), *["python decode.py"] * 16)
    [rec] = by_rule(recs(crowded, data_wait_of(crowded, [[MP_QUEUE_LOOP]] * 10, DECODING)),
                    "dataloader_starvation")
    patch = rec.action["patch"]
    assert "More would not help either: 16 already share the 32 CPUs with 1 GPU process" \
        in patch, patch
    assert "range(" not in patch and "ThreadPoolExecutor" not in patch, patch


def test_a_loop_fed_by_a_multiprocessing_pool_is_told_its_pool_size_and_its_workers_line():
    """A Pool's imap: more processes for the Pool, and the line its workers spend their time
    on, from their own stacks (the daemon dumps a Pool's workers: phases.waits_on_data_queue)."""
    s = with_children(window(), "python pool_loader.py", "python pool_loader.py")
    phases = data_wait_of(s, [POOL_LOOP] * 10)
    for pid in (50, 51):  # each worker's phase balance, from its dumps: running Python (no
        # data wait of its own, though it runs in the Pool's pool.py `worker`)
        worker = data_wait_of(s, [POOL_WORKER] * 6, pid=pid, phase="unknown")[pid_id(s)]
        phases[f"{pid}:1.000"] = worker
    [rec] = by_rule(recs(s, phases), "dataloader_starvation")
    assert rec.headline.startswith("more worker processes, or faster ones (pid 42: ")
    patch = rec.action["patch"]
    assert "(a multiprocessing Pool), and they cannot keep up. It has 2 worker processes " \
        "now." in patch, patch
    assert "-pool = multiprocessing.Pool(...)\n+pool = multiprocessing.Pool(processes=16)" \
        in patch, patch
    assert "its workers spend the most samples at /srv/pool_loader.py:16 (decode)" in patch, \
        patch
    assert "ThreadPoolExecutor" not in patch and "py-spy top" not in patch, patch


# the loop of tests/daemon/workloads/executor_fed.py on its ProcessPoolExecutor's futures,
# beside the pool's manager thread (Python 3.11)
EXECUTOR_LOOP = [
    ThreadStack(1, "MainThread", False, (
        Frame("Condition.wait", f"{STDLIB}/threading.py", 327),
        Frame("Future.result", f"{STDLIB}/concurrent/futures/_base.py", 451),
        Frame("batches", "/srv/executor_fed.py", 50), Frame("main", "/srv/executor_fed.py", 79),
        Frame("<module>", "/srv/executor_fed.py", 86))),
    ThreadStack(2, "Thread-1", False, (
        Frame("_PollLikeSelector.select", f"{STDLIB}/selectors.py", 415),
        Frame("wait", f"{STDLIB}/multiprocessing/connection.py", 947),
        Frame("_ExecutorManagerThread.wait_result_broken_or_wakeup",
              f"{STDLIB}/concurrent/futures/process.py", 417),
        Frame("_ExecutorManagerThread.run", f"{STDLIB}/concurrent/futures/process.py", 344),
        *THREAD_RUN))]


def test_a_loop_fed_by_a_process_pool_executor_is_told_more_of_its_workers_not_threads():
    """Its worker processes make its batches: more of them for the executor, not a thread
    pool, nor a multiprocessing.Queue it does not use."""
    s = with_children(window(), "python executor_fed.py", "python executor_fed.py")
    [rec] = by_rule(recs(s, data_wait_of(s, [EXECUTOR_LOOP] * 10, DECODING)),
                    "dataloader_starvation")
    assert rec.evidence["where"] == "/srv/executor_fed.py:50", rec.evidence["where"]
    assert rec.headline.startswith("more worker processes, or faster ones (pid 42: ")
    patch = rec.action["patch"]
    assert "(a ProcessPoolExecutor), and they cannot keep up. It has 2 worker processes " \
        "now." in patch, patch
    assert "-pool = concurrent.futures.ProcessPoolExecutor(...)\n" \
        "+pool = concurrent.futures.ProcessPoolExecutor(max_workers=16)" in patch, patch
    assert "ThreadPoolExecutor" not in patch and "multiprocessing.Queue(" not in patch, patch


def test_idle_advice_counts_its_gpus_and_its_minutes_as_the_panels_do():
    s = window(utils=[0.0] * 8, holders={0: 0.0, 1: 0.0})
    [rec] = by_rule(recs(s, limits={"idle_held_min_s": 60.0}), "idle_gpu_held")
    # idle through all 10 min the rules read: maybe for hours (its idle event says since when)
    assert "holds GPUs 0, 1 (10.0 GiB) idle for at least 10 min (the whole window" in rec.summary
    later = window(utils=lambda i: [50.0 if i < 56 else 0.0] * 8, holders={3: 0.0})
    [rec] = by_rule(recs(later, limits={"idle_held_min_s": 30.0}), "idle_gpu_held")
    assert "holds GPU 3 (10.0 GiB) idle for 40 s," in rec.summary  # not "0 min", no "at least"


def test_each_rule_says_its_advice_in_a_headline_that_agrees_with_its_summary():
    """At 80 columns a recommendation's row shows 40 characters of its summary: its subject
    ("daemon.sim.workloads.data_starved (pid…"), never what to do. Each finding carries a
    headline — who, the figure, the advice — with the summary's own figures."""
    s = window()
    phases = phases_for(s, data_wait=0.834, compute=0.166)
    [loader] = by_rule(recs(s, phases), "dataloader_starvation")
    pid = pid_id(s).split(":")[0]
    # the advice first: where a row cuts it, what to do stays
    assert loader.headline == f"prefetch in DataLoader workers (pid {pid}: 83% in data wait)"
    assert "spends 83%" in loader.summary and len(loader.headline) < len(loader.summary)

    idle = window(utils=[0.0] * 8, holders={0: 0.0, 1: 0.0})
    [held] = by_rule(recs(idle, limits={"idle_held_min_s": 60.0}), "idle_gpu_held")
    # its cost before how long: cut at 40 columns (a row at 80x24), the money stays
    burn = held.headline.split(" at ")[1].split(" on ")[0]
    assert burn.startswith("$") and burn.endswith("/h") and burn in held.summary
    assert held.headline[:40].startswith(f"pid {pid_id(idle).split(':')[0]} idle at {burn}")
    assert held.headline.endswith(" on GPUs 0, 1, for at least 10 min (the whole window the "
                                  "rules read)")

    blocking, spot = checkpointing_every_7s()
    assert blocking.headline.startswith("checkpoint asynchronously or less often (pid ")
    assert blocking.headline.endswith(": 45% in checkpointing)")
    assert spot.headline.startswith("run on spot at $") and "checkpoints every 7 s" in spot.headline
    for finding in (loader, held, blocking, spot):
        wire = finding.as_wire()  # the headline reaches the wire, one line
        assert wire.headline == finding.headline and "\n" not in wire.headline


def test_a_loop_waiting_on_its_workers_seen_from_proc_alone_is_told_more_or_faster_workers():
    """py-spy denied, /proc said it waited (in a pipe's read) on its 2 worker processes: the
    patch said 'waits here for input it reads itself' and offered a ThreadPoolExecutor, as to
    a loop reading its own files. Its workers make the input: more of them, or faster ones;
    and, no stack saying which pool they are, no multiprocessing.Queue it may not use."""
    s = with_children(window(), "python train.py", "python train.py")
    facts = ProcFacts(pid=42, threads=3, running=0, in_d=0, main_state="S",
                      wchan="pipe_read", syscall="read", traceable=False)
    said = classify_from_proc(facts, DECODING, busy_workers=2)
    assert said.phase == "data_wait", said
    frames = (proc_where(facts),)
    samples = [StackSample(s[0].ts + i, 42, 42, stack_hash(frames), frames, said.phase, 1.0,
                           said.reason) for i in range(10)]
    [rec] = by_rule(recs(s, {pid_id(s): phase_balance(samples, 600.0, 0.0)}),
                    "dataloader_starvation")
    assert rec.headline.startswith("more worker processes, or faster ones (pid 42: "), \
        rec.headline
    patch = rec.action["patch"]
    assert "ThreadPoolExecutor" not in patch and "reads itself" not in patch, patch
    assert "waits here for input its worker processes make" in patch, patch
    assert "It has 2 worker processes now." in patch, patch
    assert "(its stack unread: a DataLoader's, a Pool's or its own)" in patch, patch
    assert "# Run more of them: 16 (32 CPUs / 1 GPU process), as a DataLoader's num_workers" \
        in patch, patch
    assert "multiprocessing.Queue(" not in patch, patch
