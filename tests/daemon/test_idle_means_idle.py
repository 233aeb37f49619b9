"""Idle means idle: idle_gpu_held (and its SIGTERM) only for a process with no sign of work.

Windows of raw Samples through the real rules (build_analysis + evaluate). The live check, a
real torch DataLoader job starved to ~4% beside the demo's idle notebook, is in test_corpus.py.
"""

from __future__ import annotations

from daemon.analysis.cost import host_price
from daemon.analysis.kinds import NOTEBOOK, TRAINING, Kind
from daemon.analysis.rules import build_analysis, evaluate
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.wire import signal_command
from pricing.catalog import Catalog
from pricing.detect import Instance

GIB = 2**30
CATALOG = Catalog.load()
P4D = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", "on-demand", "t"), CATALOG)
START = 100_000.0
WAITING = {"share": 1.0, "seconds": 600.0, "top_stacks": [
    {"file": "/home/me/nb.py", "line": 12, "function": "wait_for_input", "samples": 40,
     "reason": "waiting in select (selectors.py:468 EpollSelector.select)"}]}


def held(n: int = 61, util: float = 0.0, sm_share: float = 0.0, read_per_tick: int = 0,
         state: str = "S", cpu_per_tick: float = 0.0, sm_every: int = 1,
         sm_from: int = 0) -> list[Sample]:
    """n ticks 10 s apart: pid 42 holds GPU 0 (12 GiB) at `util`; the other GPUs are empty. Its
    SM share reads `sm_share` at every `sm_every`th tick from tick `sm_from`, else 0; its CPU
    time grows `cpu_per_tick` seconds a tick."""
    out = []
    for i in range(n):
        share = sm_share if i >= sm_from and (i - sm_from) % sm_every == 0 else 0.0
        gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok", util if g == 0 else 0.0, None,
                               12 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
        proc = ProcessSample(42, START - 60, 1, "ann", "python job.py",
                             (GpuUse(0, 12 * GIB, share),),
                             cpu_seconds=1.0 + i * cpu_per_tick,
                             read_bytes=i * read_per_tick, write_bytes=0, state=state)
        out.append(Sample(START + i * 10.0, i, gpus=gpus, processes=(proc,)))
    return out


def advice(samples: list[Sample], phases: dict | None = None,
           limits: dict[str, float] | None = None, kind: Kind | None = None
           ) -> dict[str, list]:
    key = f"42:{START - 60:.3f}"
    found = evaluate(build_analysis(samples, {key: phases} if phases else None, P4D, CATALOG,
                                    host_cpus=32, limits=limits,
                                    kinds={key: kind} if kind else None))
    by_rule: dict[str, list] = {}
    for rec in found:
        by_rule.setdefault(rec.rule, []).append(rec)
    return by_rule


def test_a_process_whose_stacks_wait_gets_the_sigterm_with_where_it_waits():
    [rec] = advice(held(), {"idle": WAITING})["idle_gpu_held"]
    assert rec.action["kind"] == "sigterm" and rec.action["pid"] == 42
    [where] = rec.evidence["no_sign_of_work"]["waiting_in"]
    assert where["function"] == "wait_for_input" and "select" in where["reason"]


def test_a_starved_job_gets_the_pipeline_advice_never_the_sigterm():
    # ~4% utilization, below the 5% idle line: the GPU counts as idle, the job is working.
    starved = {"data_wait": {"share": 0.9, "seconds": 540.0, "top_stacks": [
                   {"file": "/home/me/train.py", "line": 31, "function": "run_epochs",
                    "samples": 50, "reason": "DataLoader waiting for a batch from its workers"}]},
               "compute": {"share": 0.1, "seconds": 60.0, "top_stacks": []}}
    found = advice(held(util=4.0, sm_share=0.5), starved)
    assert "idle_gpu_held" not in found
    assert "dataloader_starvation" in found
    assert not [r for rs in found.values() for r in rs if r.action.get("kind") == "sigterm"]


def test_any_work_phase_in_the_window_keeps_the_sigterm_away():
    for phase in ("data_wait", "host_preprocess", "checkpoint", "eval", "sync", "comm"):
        mixed = {"idle": {**WAITING, "share": 0.9}, phase: {"share": 0.1, "top_stacks": []}}
        assert "idle_gpu_held" not in advice(held(), mixed), phase


def test_reads_d_state_or_own_kernels_are_signs_of_work():
    assert "idle_gpu_held" not in advice(held(read_per_tick=50 << 20), {"idle": WAITING})
    assert "idle_gpu_held" not in advice(held(state="D"), {"idle": WAITING})
    assert "idle_gpu_held" not in advice(held(util=3.0, sm_share=3.0), {"idle": WAITING})


def test_a_thread_using_a_cpu_while_its_gpu_idles_is_work():
    """Probe 132 H3/H7: the main thread joins (or polls is_alive of) a worker thread that
    computes on the CPU; its stacks read idle, its CPU time grows. Half a core (a loaded host)
    is work: no idle_gpu_held, no host stop; a few hundredths of a core (a sleeper that wakes
    now and then) are not."""
    short = {"host_idle_min_s": 300.0}
    found = advice(held(cpu_per_tick=5.0), {"idle": WAITING}, limits=short)
    assert not {"idle_gpu_held", "host_idle"} & set(found), sorted(found)
    [rec] = advice(held(cpu_per_tick=0.2), {"idle": WAITING})["idle_gpu_held"]
    assert rec.action["kind"] == "sigterm"


def test_a_small_kernel_every_few_seconds_is_work_a_warm_up_pass_is_not():
    """Probe 132 H2: a 30 ms kernel per 3 s reads a small SM share at most ticks and averages
    far below 1%: work (no idle_gpu_held, no host stop). One warm-up pass as it went idle
    (three readings at the start of the idle span) is not."""
    short = {"host_idle_min_s": 300.0}
    found = advice(held(sm_share=0.3, sm_every=3), {"idle": WAITING}, limits=short)
    assert not {"idle_gpu_held", "host_idle"} & set(found), sorted(found)
    samples = held(sm_share=0.3)[:3] + held()[3:]
    [rec] = advice(samples, {"idle": WAITING})["idle_gpu_held"]
    assert rec.action["kind"] == "sigterm"


SLEEPING = {"share": 1.0, "seconds": 600.0, "top_stacks": [
    {"file": "/home/me/worker.py", "line": 12, "function": "main", "samples": 40,
     "reason": "sleeping or waiting: `time.sleep(2)` with the GPU idle"}]}


def test_a_sleeper_that_does_something_between_sleeps_is_a_poller_never_stopped():
    """Probe 132 H1/H1b: a worker polls a job table (an HTTP broker, a folder through a helper)
    and sleeps when nothing came; its stacks show the sleep alone, its CPU time moves (10 ms a
    minute here). Look first, never the SIGTERM, and the host is not stopped under it. A
    sleeper whose CPU time does not move keeps the SIGTERM."""
    short = {"host_idle_min_s": 300.0}
    found = advice(held(cpu_per_tick=0.01 / 6), {"idle": SLEEPING}, limits=short)
    [rec] = found["idle_gpu_held"]
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "polling for jobs" in rec.action["text"] and "worker.py:12" in rec.action["text"]
    assert "host_idle" not in found, sorted(found)
    [rec] = advice(held(), {"idle": SLEEPING})["idle_gpu_held"]
    assert rec.action["kind"] == "sigterm"


def test_the_gpu_worker_of_a_serving_parent_is_part_of_the_server():
    """Probe 132 H5: an HTTP front end hands requests to its GPU child over a pipe; the child
    waits on the pipe, its parent serves (Kind.serving_parent): idle_server's advice, never
    the SIGTERM, and no host stop."""
    worker = Kind(TRAINING, 0.33, ("bursty",), serving_parent=7)
    found = advice(held(), {"idle": WAITING}, limits={"host_idle_min_s": 300.0}, kind=worker)
    assert not {"idle_gpu_held", "host_idle"} & set(found), sorted(found)
    [rec] = found["idle_server"]
    assert "its parent, pid 7, serves" in rec.summary, rec.summary


def test_without_stacks_the_advice_stays_but_says_look_first_instead_of_sigterm():
    [rec] = advice(held())["idle_gpu_held"]
    assert rec.action["kind"] == "copy_commands"
    assert rec.action["commands"][0] == "sudo py-spy dump --pid 42"
    assert "no stack sampled" in rec.summary


def test_the_host_is_not_stopped_while_a_process_on_it_works_however_idle_its_gpus_read():
    """Producer threads decoding in Python feed a loop that keeps its GPU 2% busy: every GPU
    reads idle, and host_idle offered to stop the instance under the job. A process working
    (any sign of work) keeps the host; one whose stacks wait for nothing does not."""
    starved = {"data_wait": {"share": 0.95, "seconds": 570.0, "top_stacks": [
                   {"file": "/home/me/augment.py", "line": 31, "function": "augment",
                    "samples": 60, "reason": "main thread waiting in a queue's get in C"}]}}
    short = {"host_idle_min_s": 300.0}
    found = advice(held(util=2.0), starved, limits=short)
    assert "host_idle" not in found and "idle_gpu_held" not in found
    assert "dataloader_starvation" in found
    [stop] = advice(held(util=2.0), {"idle": WAITING}, limits=short)["host_idle"]
    assert stop.action["kind"] == "copy_commands"


JOB_WAITING = {"share": 0.95, "seconds": 570.0, "top_stacks": [
    {"file": "/home/me/worker.py", "line": 44, "function": "main", "samples": 40,
     "reason": "waiting for its next job from a multiprocessing manager's queue "
               "(managers.py:822 BaseProxy._callmethod)"}]}


def test_a_worker_waiting_for_jobs_gets_scale_to_zero_advice_never_the_sigterm():
    """A queue consumer between jobs is to jobs what a server is to requests: idle_server's
    advice (scale the workers with the queue), no SIGTERM, no host stop, no prefetch advice."""
    found = advice(held(), {"idle": JOB_WAITING, "data_wait": {
        "share": 0.05, "seconds": 30.0, "top_stacks": [
            {"file": "/home/me/worker.py", "line": 21, "function": "recv_exact", "samples": 3,
             "reason": "reading a file or socket: `chunk = sock.recv(size - len(buf))`"}]}},
                   limits={"host_idle_min_s": 300.0})
    assert "idle_server" in found, sorted(found)
    assert not {"idle_gpu_held", "host_idle", "dataloader_starvation"} & set(found), sorted(found)
    [rec] = found["idle_server"]
    assert rec.action["kind"] == "advice" and "queue" in rec.action["text"]
    assert "waits for its next one (/home/me/worker.py:44" in rec.summary
    assert "serves (TCP" not in rec.summary and "between jobs" in rec.headline
    assert rec.evidence["waits_for_jobs"]["function"] == "main"
    # a stray sample of it (1 of 41 idle samples in a 60% idle share: 1.5% of the window) does
    # not make a consumer
    stray = {"idle": {**WAITING, "share": 0.6, "top_stacks": [*WAITING["top_stacks"], {
        **JOB_WAITING["top_stacks"][0], "samples": 1}]}}
    [held_idle] = advice(held(), stray)["idle_gpu_held"]
    assert held_idle.action["kind"] == "sigterm"


def test_one_run_of_work_then_a_sleep_is_looked_at_first_a_warm_up_then_a_sleep_is_not():
    """Probe 132 M1: a periodic eval ran its kernels (two readings at 80%, 10 s apart: 8 s of
    kernels counted: the first reading stands for no known time) and sleeps in `time.sleep`
    until its next run; with one run in the window (its first interval, the first after the
    daemon started, or every interval where its period outlasts the window) it was offered the
    SIGTERM. Now the look first, saying one run was seen and where it sleeps. A
    warm-up pass (0.2 s of kernels) then the same sleep, a run then a wait on input (not a
    sleep), and a notebook that ran a cell then sleeps keep the SIGTERM."""
    def ran(sm_share: float, ticks: int = 2) -> list[Sample]:
        return held(util=90.0, sm_share=sm_share)[:ticks] + held()[ticks:]

    short = {"idle_held_min_s": 300.0}
    [rec] = advice(ran(80.0), {"idle": SLEEPING}, limits=short)["idle_gpu_held"]
    assert rec.action["kind"] == "copy_commands", rec.action
    assert rec.action["text"].startswith(
        "pid 42 ran 8 s of kernels, then sleeps (/home/me/worker.py:12): one run seen: a "
        "periodic job between its runs looks the same"), rec.action["text"]
    # (to copy, after looking; it signals only the process the rule saw: signal_command)
    assert signal_command(42, START - 60) in rec.action["commands"], rec.action["commands"]
    assert rec.evidence["no_sign_of_work"]["kernel_s_before_idle"] == 8.0
    assert rec.evidence["no_sign_of_work"]["work_runs"] == 1
    for samples, phases, kind in ((ran(2.0), {"idle": SLEEPING}, None),
                                  (ran(80.0), {"idle": WAITING}, None),
                                  (ran(80.0), {"idle": SLEEPING}, Kind(NOTEBOOK, 0.8, ("t",)))):
        [rec] = advice(samples, phases, limits=short, kind=kind)["idle_gpu_held"]
        assert rec.action["kind"] == "sigterm", (phases, kind, rec.action)
