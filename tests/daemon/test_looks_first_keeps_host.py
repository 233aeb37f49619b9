"""Whatever idle_gpu_held looks at first instead of offering the SIGTERM, the host is not
stopped for: host_idle holds back, and GET /v1/idle (Analyzer.working) names why.

A look first means mlcostd cannot tell that stopping the process stops nothing that works or
may run again; stopping its host stops it all the same. host_idle's test (`at_work`) counted
some look firsts (a periodic job, one run then a plain sleep, a child wait, a poller) and not
others: a job between batches whose wait is no plain sleep, a process without stacks (one run
seen, py-spy could not read it), one only /proc says waits, one on a lock, on its peers'
sockets or on an asyncio timer got the look first while host_idle said "stop the host" and
/v1/idle answered idle. Now one test decides both (rules/idle.py's idle_verdict).

Real Analysis and ProcessWindow (build_analysis over real Samples) and real Analyzer rounds.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_rules import CATALOG, P4D, by_rule, idle_held_phases, pid_id, window

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.idle import IdleThresholds
from daemon.analysis.idleness import process_evidence
from daemon.analysis.kinds import NOTEBOOK, TRAINING, Kind
from daemon.analysis.rules import build_analysis, evaluate
from daemon.analysis.rules import idle as rules_idle
from daemon.analysis.rules.idle import at_work, idle_verdict, work_reasons
from daemon.analysis.rules.window import ProcessHistory
from daemon.analysis.stack_rules import (
    CHILD_WAIT,
    FD_WAIT,
    FILE_WAIT,
    LOCK_WAIT,
    PROMPT_WAIT,
    SCRIPT_PROMPT,
    STOPPED,
    TIMER_WAIT,
)
from daemon.wire import LOW_CONFIDENCE

LIMITS = {"idle_held_min_s": 60.0, "host_idle_min_s": 60.0}
SLEEP = "sleeping or waiting: `time.sleep(3600)` with the GPU idle"
EVENT = "waiting in Condition.wait (threading.py:331 Condition.wait)"
FILE_AWAITED = (f"{FILE_WAIT}: sleeping (`time.sleep(10)`) in a loop that checks for a path "
                "(`while not os.path.exists(\"/data/prep/_SUCCESS\"):`, line 6): a done-marker, "
                "a go-file or a resume file that another job or a person writes; it goes on "
                "when the file appears")
ASKED = (f"{PROMPT_WAIT}: {SCRIPT_PROMPT} waiting for its user's answer (`ans = input(\"Start "
         "the 12 h fine-tune now? [y/N] \")`)")
REPL = (f"{PROMPT_WAIT}: an interpreter in a terminal reading its user's next line (in C: no "
        "Python frame)")
PAUSE = ("waiting for a signal (another process may poke it to work, or it waits to be "
         "stopped): `signal.pause()`")


def idle_job(runs=(), sm=80.0, command="python batches.py", **kw):
    """A job on GPU 0 of an idle 8-GPU host, 600 s of window: its kernels (SM share `sm` of a
    10 s tick: 80% is 8 s of kernels) at the ticks `runs`."""
    samples = window(n=61, utils=lambda i: [90.0 if i in runs else 0.0] + [0.0] * 7,
                     holders={0: 0.0}, command=command, **kw)
    return [dataclasses.replace(smp, processes=tuple(
        dataclasses.replace(p, gpus=tuple(dataclasses.replace(
            u, sm_share=sm if smp.tick in runs else 0.0) for u in p.gpus))
        for p in smp.processes)) for smp in samples]


def low_confidence(samples):
    """Its phases from /proc alone (ptrace denied): idle, low confidence."""
    phases = idle_held_phases(samples, "no stacks: the main thread waits in futex_wait", idle=1.0)
    phases[pid_id(samples)]["idle"]["confidence"] = LOW_CONFIDENCE
    return phases


def polling(i):
    return {"cpu_seconds": i * 0.005}  # 0.5 ms of CPU a 10 s tick: a poll between its sleeps


# (what it is, its samples, its phases, its kind, its history, idle_gpu_held's verdict): each
# a look first. The first seven were looked at first while host_idle said "stop the host".
LOOKS_FIRST = {
    "a job between batches waiting on an Event": (
        lambda: idle_job(runs={2}), lambda s: idle_held_phases(s, EVENT, idle=0.66, compute=0.34),
        TRAINING, None, rules_idle.BETWEEN_BATCHES),
    "one run seen without stacks": (
        lambda: idle_job(runs={2}), lambda s: None, TRAINING, None, rules_idle.NO_STACKS),
    "no stacks at all": (
        lambda: idle_job(), lambda s: None, TRAINING, None, rules_idle.NO_STACKS),
    "only /proc says it waits": (
        lambda: idle_job(runs={2}), low_confidence, TRAINING, None, rules_idle.PROC_ONLY),
    "waiting on a lock": (
        lambda: idle_job(), lambda s: idle_held_phases(
            s, f"{LOCK_WAIT}: `fcntl.flock(lk, fcntl.LOCK_EX)` with the GPU idle", idle=1.0),
        TRAINING, None, rules_idle.ON_A_LOCK),
    "waiting on its peers' sockets": (
        lambda: idle_job(), lambda s: idle_held_phases(s, f"{FD_WAIT}: `select.select(r, [], [])`",
                                                       idle=1.0),
        Kind(TRAINING, 0.6, ("test",), peer_connections=2), None, rules_idle.ON_PEERS),
    # probe 143 F10: a UDP server on 0.0.0.0 on a port in the ephemeral range reads as a
    # statsd client's socket; waiting on its sockets, it may be serving datagrams
    "waiting on its sockets with a UDP port on all addresses": (
        lambda: idle_job(), lambda s: idle_held_phases(
            s, "waiting in select (selectors.py:468 EpollSelector.select)", idle=1.0),
        Kind(TRAINING, 0.6, ("test",), udp_wildcard_ports=(47151,)), None,
        rules_idle.ON_DATAGRAMS),
    # probe 152 H2: a trainer sleeping until a preprocessing job's done-marker appears
    "waiting for a file another process writes": (
        lambda: idle_job(), lambda s: idle_held_phases(s, FILE_AWAITED, idle=1.0),
        TRAINING, None, rules_idle.ON_A_FILE),
    # probe 152 M1: a script asking its user at input() in a terminal, as a REPL's prompt
    "a script's input() prompt": (
        lambda: idle_job(), lambda s: idle_held_phases(s, ASKED, idle=1.0),
        TRAINING, None, rules_idle.AT_PROMPT),
    "an interactive Python prompt": (
        lambda: idle_job(command="python"), lambda s: idle_held_phases(s, REPL, idle=1.0),
        NOTEBOOK, None, rules_idle.AT_PROMPT),
    "an asyncio loop a timer wakes": (
        lambda: idle_job(), lambda s: idle_held_phases(
            s, f"{TIMER_WAIT} (selectors.py:468 EpollSelector.select)", idle=1.0),
        TRAINING, None, rules_idle.ON_A_TIMER),
    # ... and those host_idle counted already
    "its sockets not known, no stacks": (
        lambda: idle_job(), lambda s: None,
        Kind(TRAINING, 0.4, ("test",), sockets_unknown=True), None, rules_idle.SOCKETS_UNKNOWN),
    "waiting for its child": (
        lambda: idle_job(), lambda s: idle_held_phases(
            s, f"{CHILD_WAIT} (subprocess.py:1264 Popen.wait)", idle=1.0),
        TRAINING, None, rules_idle.ON_A_CHILD),
    "a poller between its sleeps": (
        lambda: idle_job(proc_kw=polling), lambda s: idle_held_phases(s, SLEEP, idle=1.0),
        TRAINING, None, rules_idle.POLLER),
    "a periodic job between its runs": (
        lambda: idle_job(runs={5, 20, 35}), lambda s: idle_held_phases(s, SLEEP, idle=0.97),
        TRAINING, None, rules_idle.PERIODIC),
    "one run seen, then a plain sleep": (
        lambda: idle_job(runs={2}), lambda s: idle_held_phases(s, SLEEP, idle=0.99),
        TRAINING, None, rules_idle.ONE_RUN),
    # probe 143 F8: a re-ranker poked with SIGUSR1 ran once and waits in signal.pause()
    "one run seen, then a wait for a signal": (
        lambda: idle_job(runs={2}), lambda s: idle_held_phases(s, PAUSE, idle=0.99),
        TRAINING, None, rules_idle.ONE_RUN),
    "running before mlcostd started": (
        lambda: idle_job(), lambda s: idle_held_phases(s, EVENT, idle=1.0), TRAINING,
        lambda s: ProcessHistory(s[0].ts, unseen_s=3600.0), rules_idle.UNSEEN),
}
# ... and the SIGTERM, with the host's stop
STOPPED_AS_IS = {
    "a warm-up pass, then a plain sleep": (
        lambda: idle_job(runs={2}, sm=5.0), lambda s: idle_held_phases(s, SLEEP, idle=0.99),
        TRAINING, None),
    "a notebook whose cell ran, then its prompt": (
        lambda: idle_job(runs={2}, command="python -m ipykernel_launcher"),
        lambda s: idle_held_phases(s, EVENT, idle=0.66, compute=0.34), NOTEBOOK, None),
    # no run seen: a job that keeps its model loaded until it is stopped reads the same
    "a wait for a signal before any run": (
        lambda: idle_job(), lambda s: idle_held_phases(s, PAUSE, idle=1.0), TRAINING, None),
    # a statsd client's socket (the same row as a server's) while it sleeps: no server sleeps
    "a plain sleep with a statsd client's UDP socket": (
        lambda: idle_job(), lambda s: idle_held_phases(s, SLEEP, idle=1.0),
        Kind(TRAINING, 0.6, ("test",), udp_wildcard_ports=(47151,)), None),
    # state T: nothing of it runs until it is continued; its runs before the stop count not
    "a periodic job stopped by SIGSTOP": (
        lambda: idle_job(runs={5, 20, 35}), lambda s: idle_held_phases(
            s, f"{STOPPED}: nothing of it runs until it is continued", idle=0.97),
        TRAINING, None),
}


def analysis_of(samples, phases, kind, history):
    kind = kind if isinstance(kind, Kind) else Kind(kind, 0.6, ("test",))
    return build_analysis(samples, phases, P4D, CATALOG, host_cpus=32, limits=LIMITS,
                          kinds={pid_id(samples): kind},
                          history={pid_id(samples): history(samples)} if history else None)


@pytest.mark.parametrize("case", list(LOOKS_FIRST))
def test_every_look_first_keeps_the_host_and_says_why_for_v1_idle(case):
    make, phases_of, kind, history, reason = LOOKS_FIRST[case]
    samples = make()
    analysis = analysis_of(samples, phases_of(samples), kind, history)
    [proc] = analysis.processes
    found = evaluate(analysis)
    [held] = by_rule(found, "idle_gpu_held")
    verdict = idle_verdict(proc, analysis)
    assert verdict.reason == reason and verdict.looks_first, (case, verdict.reason)
    assert held.action == verdict.action and held.action["kind"] == "copy_commands", held.action
    assert analysis.host_trailing_idle_s >= LIMITS["host_idle_min_s"]
    assert by_rule(found, "host_idle") == [], (case, [h.summary for h in found])
    assert [p.id for p in at_work(analysis)] == [proc.id], case
    reasons = work_reasons(proc, analysis)
    # a periodic job's runs reach GET /v1/idle from Analyzer.periodic, not twice
    assert reasons == ([] if reason == rules_idle.PERIODIC else [verdict.why]), reasons


@pytest.mark.parametrize("case", list(STOPPED_AS_IS))
def test_what_gets_the_sigterm_leaves_the_host_to_its_stop(case):
    make, phases_of, kind, history = STOPPED_AS_IS[case]
    samples = make()
    analysis = analysis_of(samples, phases_of(samples), kind, history)
    [proc] = analysis.processes
    found = evaluate(analysis)
    [held] = by_rule(found, "idle_gpu_held")
    assert held.action["kind"] == "sigterm", (case, held.action)
    assert not idle_verdict(proc, analysis).looks_first
    assert at_work(analysis) == [] and work_reasons(proc, analysis) == []
    [stop] = by_rule(found, "host_idle")
    assert stop.action["kind"] == "copy_commands", stop.action


T0 = 1_800_000_000.0


def test_the_analyzer_keeps_the_host_and_names_the_look_first_for_v1_idle():
    """Real Analyzer rounds (its window, its memory of processes) over a job that computes a
    batch (20 s of kernels at 80%), then waits on an Event: a round with its stacks (compute 30%
    of the window, then the wait) and a round with none (py-spy could not read it). In both,
    idle_gpu_held looks first, no host_idle, and Analyzer.working names why (GET /v1/idle's
    reasons), so the host_idle event holds back too. Not periodic: one run."""
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

    gib = 1 << 30
    key = f"42:{T0 - 1:.3f}"

    def tick(i):
        busy = 3 <= i < 5
        gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok",
                               90.0 if busy and g == 0 else 0.0, None,
                               10 * gib if g == 0 else 0, 40 * gib) for g in range(8))
        proc = ProcessSample(42, T0 - 1, 1, "ann", "python batches.py",
                             (GpuUse(0, 10 * gib, 80.0 if busy else 0.0),))
        return Sample(T0 + 10 * i, i, gpus=gpus, processes=(proc,))

    stacks = [{"frames": ["batches.py:33 main"], "file": "/srv/batches.py", "line": 33,
               "function": "main", "samples": 40, "reason": EVENT}]
    with_stacks = {key: {"idle": {"share": 0.7, "seconds": 420.0, "top_stacks": stacks},
                         "compute": {"share": 0.3, "seconds": 180.0, "top_stacks": []}}}
    for phases, said in ((with_stacks, "a job between batches may compute again"),
                         ({}, "no stack sample says what it waits for")):
        a = Analyzer(P4D, CATALOG, IdleThresholds(gpu_held_after_s=60.0, host_after_s=60.0),
                     recommendation_hold_s=0.0)
        a.run_started_at = T0 - 5.0
        for i in range(40):
            a.update(tick(i))
        found = a.evaluate(phases)
        [held] = by_rule(found, "idle_gpu_held")
        assert held.action["kind"] == "copy_commands", held.action
        assert by_rule(found, "host_idle") == [], [f.summary for f in found]
        assert any(said in why for why in a.working()[key]), a.working()
        assert a.periodic() == {}


def test_one_run_then_a_wait_for_a_signal_says_so():
    samples = idle_job(runs={2})
    analysis = analysis_of(samples, idle_held_phases(samples, PAUSE, idle=0.99), TRAINING, None)
    [proc] = analysis.processes
    verdict = idle_verdict(proc, analysis)
    assert "then waits for a signal (" in verdict.action["text"], verdict.action
    assert "then waits for a signal: one run seen" in (verdict.why or ""), verdict.why


def test_a_file_wait_and_a_scripts_prompt_say_what_to_look_at():
    """Probe 152 H2 and M1: a trainer sleeping until a done-marker appears, and a script waiting
    at input() in a terminal, were offered the SIGTERM and let the host stop. Their look firsts
    name the wait: the path and its writer to find (strace, what else works on the host), the
    prompt's user to ask (not "exit() or Ctrl-D at the prompt", a REPL's words); and a tick's
    /v1/idle counts the file wait as work as it counts a remote service's retry."""
    samples = idle_job()
    analysis = analysis_of(samples, idle_held_phases(samples, FILE_AWAITED, idle=1.0), TRAINING,
                           None)
    [proc] = analysis.processes
    action = idle_verdict(proc, analysis).action
    assert "sleeps in a loop until a file appears" in action["text"], action
    assert any("strace" in c and "trace=file" in c for c in action["commands"]), action
    assert not any("kill" in c for c in action["commands"][:2]), action
    samples = idle_job()
    analysis = analysis_of(samples, idle_held_phases(samples, ASKED, idle=1.0), TRAINING, None)
    [proc] = analysis.processes
    verdict = idle_verdict(proc, analysis)
    assert "waits at an input() prompt of its script" in verdict.action["text"], verdict.action
    assert "Ctrl-D" not in verdict.action["text"], verdict.action
    assert "input() prompt of its script" in (verdict.why or ""), verdict.why
    tick = {"phase": "idle", "phase_reasons": {"idle": FILE_AWAITED}, "phases": {"idle": 0.99}}
    assert any("until a file appears" in why for why, _ in process_evidence(tick))
