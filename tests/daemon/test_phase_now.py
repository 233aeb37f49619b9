"""The phase a process is in now (/v1/now's `phase_now`, mlcost-top's phase column): stacks are
sampled only while its GPU is quiet, so a process back at work on a busy GPU keeps a balance
whose stacks all predate its return. The column then says what the GPU says (`compute`), not
the old stacks' `idle` (probe 125 F16: `idle` beside 95% SM on a busy GPU)."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
import time

import pytest
from scripted import recording_daemon
from simhost import poll

from daemon.analysis.live_phases import LivePhases
from daemon.api.document import ProcessEntries, now_document
from daemon.replay import Replay
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store import facts, queries
from daemon.store.reader import StoreReader
from daemon.wire import (
    CHECKPOINT,
    COMPUTE,
    DATA_WAIT,
    HIGH_CONFIDENCE,
    IDLE,
    LOW_CONFIDENCE,
    Process,
)
from mlcost_tui.panels.processes import _phase_cell, _phase_value

KEY = "4242:1000.500"
PID = (4242, 1000.5)
STACK = {"file": "nb.py", "line": 3, "reason": "sleeps"}


def _balance(top: str, confidence: str = HIGH_CONFIDENCE) -> dict:
    """A balance its stacks decided: `top` for 80 s, then 20 s of compute (the GPU's)."""
    return {top: {"seconds": 80.0, "share": 0.8, "gpu_idle_seconds": 80.0,
                  "top_stacks": [STACK], "confidence": confidence},
            COMPUTE: {"seconds": 20.0, "share": 0.2, "gpu_idle_seconds": 0.0,
                      "top_stacks": [], "confidence": HIGH_CONFIDENCE}}


def _document(shares: tuple[float, ...], balance: dict | None, *, window: bool = False,
              memory: int = 8 << 30, entries: ProcessEntries | None = None,
              latest: str | None = None, utilization: float | None = None,
              neighbour: float | None = None) -> dict:
    """/v1/now of one tick: one process on len(shares) GPUs at those SM shares, each GPU at
    `utilization` (its share where None); `neighbour`: another process on GPU 0 at that SM
    share."""
    gpus = tuple(GpuSample(n, f"GPU-{n}", "A100", utilization=s if utilization is None
                           else utilization, memory_used_bytes=memory,
                           memory_total_bytes=40 << 30) for n, s in enumerate(shares))
    proc = ProcessSample(4242, 1000.5, 1, "alice", "python train.py",
                         gpus=tuple(GpuUse(n, memory, s) for n, s in enumerate(shares)))
    others = () if neighbour is None else (ProcessSample(
        4343, 1000.5, 1, "bob", "python serve.py", gpus=(GpuUse(0, memory, neighbour),)),)
    windows = [{"kind": "low_utilization", "target": KEY, "started_at": 0.0,
                "ended_at": None}] if window else []
    doc = now_document(host={}, sample=Sample(ts=2000.0, tick=9, gpus=gpus,
                                              processes=(proc, *others)),
                       previous=None, tick=9, idle_utilization_pct=5.0,
                       phases={KEY: balance} if balance is not None else {},
                       windows=windows, entries=entries,
                       window_phases={KEY: latest} if latest is not None else None)
    entry = doc["processes"][0]
    assert entry["key"] == KEY
    return entry


def _column(entry: dict, gpus_idle: bool = False) -> str:
    """What mlcost-top's phase column shows for this entry (`gpus_idle`: every GPU it holds
    reads IDLE in the GPU panel)."""
    return _phase_cell(_phase_value(Process.from_dict(entry), gpus_idle)).plain


@pytest.mark.parametrize("entries", [None, ProcessEntries()])
def test_a_process_back_at_work_after_idle_stacks_reads_compute_now(entries):
    entry = _document((95.0,), _balance(IDLE), entries=entries)
    assert entry["phase"] == IDLE  # the balance of its window stays what it was (the rules')
    assert entry["phase_now"] == COMPUTE
    assert _column(entry) == COMPUTE
    # the same after a wait decided from /proc alone: the GPU's word is not marked unsure
    entry = _document((95.0,), _balance(DATA_WAIT, LOW_CONFIDENCE), entries=entries)
    assert (entry["phase"], entry["phase_now"]) == (DATA_WAIT, COMPUTE)
    assert _column(entry) == COMPUTE
    assert Process.from_dict(entry).current_phase == (COMPUTE, HIGH_CONFIDENCE)


def test_the_balance_stands_in_a_window_below_the_working_share_or_before_it_is_known():
    # in an open low-utilization window its stacks are being sampled: they say what it does
    assert _document((95.0,), _balance(DATA_WAIT), window=True)["phase_now"] == DATA_WAIT
    # under [attribution].low_sm_share it is not at work (a dip starts there)
    assert _document((12.0,), _balance(DATA_WAIT))["phase_now"] == DATA_WAIT
    # no memory held: nothing of it is on the GPU
    assert _document((95.0,), _balance(IDLE), memory=0)["phase_now"] == IDLE
    # not known yet (no stack, watched under 10 s): not known now either
    young = {COMPUTE: {"seconds": 3.0, "share": 1.0, "top_stacks": []}}
    assert _document((95.0,), young)["phase_now"] is None
    assert _document((95.0,), None)["phase_now"] is None
    # a low-confidence phase it is still in keeps its mark in the column
    entry = _document((12.0,), _balance(DATA_WAIT, LOW_CONFIDENCE))
    assert _column(entry) == DATA_WAIT + "~"


@pytest.mark.parametrize("entries", [None, ProcessEntries()])
def test_in_a_window_the_last_sampled_stack_says_what_it_does_now(entries):
    """Probe 141 M1: a job that computes most of its window (balance: compute) and is writing a
    checkpoint now read `idle` in mlcost-top while its GPU idled: the column was fed the
    balance's top, not the stack sampled last. In an open window it is the last stack's."""
    balance = _balance(COMPUTE)
    entry = _document((0.0,), balance, window=True, latest=CHECKPOINT, entries=entries)
    assert (entry["phase"], entry["phase_now"]) == (COMPUTE, CHECKPOINT)
    assert _column(entry, gpus_idle=True) == CHECKPOINT
    # no stack sampled in the window yet: its balance's top, which the column shows as idle
    entry = _document((0.0,), balance, window=True, entries=entries)
    assert entry["phase_now"] == COMPUTE and _column(entry, gpus_idle=True) == IDLE
    # out of its window, back at work, the last window's stack is not what it does now
    assert _document((95.0,), balance, latest=CHECKPOINT, entries=entries)["phase_now"] == COMPUTE


@pytest.mark.parametrize("entries", [None, ProcessEntries()])
def test_a_server_on_a_busy_gpu_whose_last_stack_is_idle_does_not_read_idle(entries):
    """Probe 148 M3: the demo's inference server (batch size 1: SM 11%, so in a window for good)
    keeps its GPU 89% busy; a stack caught between two requests said idle, and the column read
    `idle` on a busy GPU. Its own kernels keep the GPU busy: it reads compute, its balance
    stays what the rules read."""
    server = _document((11.0,), _balance(COMPUTE), window=True, latest=IDLE, utilization=89.0,
                       entries=entries)
    assert (server["phase"], server["phase_now"]) == (COMPUTE, COMPUTE)
    assert _column(server) == COMPUTE
    # its balance idle from earlier quiet stretches, no stack in this window yet: the same
    entry = _document((11.0,), _balance(IDLE), window=True, utilization=89.0, entries=entries)
    assert (entry["phase"], entry["phase_now"]) == (IDLE, COMPUTE)
    # out of a window, on 4 GPUs at 20% each (under the working share): they are busy with it
    assert _document((20.0,) * 4, _balance(IDLE), entries=entries)["phase_now"] == COMPUTE
    # a wait it is sampled in stays: it says why its GPU is less busy than it could be
    assert _document((11.0,), _balance(COMPUTE), window=True, latest=DATA_WAIT, utilization=89.0,
                     entries=entries)["phase_now"] == DATA_WAIT
    # its GPU idle (under [idle].utilization, 5%): idle it is
    idle = _document((0.0,), _balance(COMPUTE), window=True, latest=IDLE, utilization=2.0,
                     entries=entries)
    assert idle["phase_now"] == IDLE and _column(idle, gpus_idle=True) == IDLE
    # a GPU another process keeps busy while this one holds memory there and runs nothing: idle
    held = _document((0.0,), _balance(IDLE), window=True, latest=IDLE, utilization=90.0,
                     neighbour=90.0, entries=entries)
    assert held["phase_now"] == IDLE
    # with a share of its own on that shared busy GPU it works there
    assert _document((6.0,), _balance(IDLE), window=True, latest=IDLE, utilization=90.0,
                     neighbour=80.0, entries=entries)["phase_now"] == COMPUTE
    # NVML without per-process shares (each reads 0): the GPU it holds alone is busy with it
    assert _document((0.0,), _balance(IDLE), window=True, latest=IDLE, utilization=90.0,
                     entries=entries)["phase_now"] == COMPUTE


def _stack(live: LivePhases, ts: float, phase: str) -> None:
    live.add_stack(PID, ts, 1, phase, [("get", "loader.py", 7)], phase, 10.0, "")


def test_a_starved_jobs_column_does_not_flip_with_each_sample():
    """Probe 148 M3: the demo's data-starved job (SM 13%: a window open for good) went
    data_wait, compute, data_wait... in the column: each tick showed the one stack sampled last,
    and one dump in six or so catches it in its short kernel. LivePhases (the daemon's) hands
    /v1/now what most of the window's recent stacks say: data_wait at every sample; a window
    just opened has its own stacks only (a save reads checkpoint from its first stack); a
    change that lasts shows once it is most of the recent stacks."""
    live = LivePhases(interval_s=1.0)
    t0 = 10_000.0
    for ts in (t0 - 40, t0 - 38, t0 - 36):  # before this window, in the mid band: compute
        _stack(live, ts, COMPUTE)
    live.window_opened(PID, t0)
    assert live.latest_phase(PID, t0) is None  # none sampled in it yet
    # a dump every 2 s, one in five caught in its kernel
    script = [DATA_WAIT, DATA_WAIT, COMPUTE, DATA_WAIT, DATA_WAIT] * 6
    shown = []
    for n, phase in enumerate(script):
        ts = t0 + 1 + 2 * n
        _stack(live, ts, phase)
        shown.append(live.latest_phase(PID, t0))
        entry = _document((13.0,), _balance(DATA_WAIT), window=True, latest=shown[-1],
                          utilization=16.0)
        assert entry["phase_now"] == DATA_WAIT and _column(entry) == DATA_WAIT, (n, shown)
    # its work stops: a stack or two do not change it; once idle leads the last 30 s of stacks
    # (16 at a dump every 2 s), within 8 dumps, it reads idle
    n = len(script)
    shown = []
    for k in range(8):
        _stack(live, t0 + 1 + 2 * (n + k), IDLE)
        shown.append(live.latest_phase(PID, t0))
    assert shown[:2] == [DATA_WAIT, DATA_WAIT] and shown[-1] == IDLE, shown
    # as many of each: the one sampled last
    tie = LivePhases(interval_s=1.0)
    tie.window_opened(PID, t0)
    _stack(tie, t0 + 1, COMPUTE)
    _stack(tie, t0 + 3, CHECKPOINT)
    assert tie.latest_phase(PID, t0) == CHECKPOINT
    # a new window of a job that computed for minutes: its first stack says what it does now
    save = LivePhases(interval_s=1.0)
    for k in range(60):
        _stack(save, t0 - 200 + 2 * k, COMPUTE)
    save.window_opened(PID, t0)
    _stack(save, t0 + 1, CHECKPOINT)
    assert save.latest_phase(PID, t0) == CHECKPOINT


def test_replay_reads_a_windows_recent_stacks_as_the_live_daemon(tmp_path):
    """Replay's phase_now in an open window (daemon.store.queries.latest_phase over the store's
    stack samples) is what the live daemon showed (LivePhases.latest_phase) after each sample
    of a starved job's window, and of a job that stops: not the last stack's alone."""
    t0 = time.time() - 200
    daemon = recording_daemon(tmp_path, 5.0, ticks=3, t0=t0)  # process 4242 in the store
    assert daemon.store is not None
    live = LivePhases(interval_s=1.0)
    since = t0 + 5
    _stack(live, since - 3, IDLE)  # before the window: neither reads it
    live.window_opened(PID, since)
    script = [DATA_WAIT, DATA_WAIT, COMPUTE, DATA_WAIT, DATA_WAIT] * 5 + [IDLE] * 12
    times = [since - 3] + [since + 1 + 2 * n for n in range(len(script))]
    facts.write_stacks(daemon.store, [facts.StackRow(
        ts=ts, pid=4242, start_time=1000.5, thread_id=1, stack_hash=phase, frames=(),
        phase=phase, gpu_util=10.0) for ts, phase in zip(times, [IDLE, *script], strict=True)])
    daemon.store.close()
    shown, replayed = [], []
    with StoreReader(tmp_path / "mlcost.db") as reader:
        for ts, phase in zip(times[1:], script, strict=True):
            _stack(live, ts, phase)
            shown.append(live.latest_phase(PID, since))
            replayed.append(queries.latest_phase(reader, 4242, 1000.5, since, ts + 0.5))
        assert queries.latest_phase(reader, 4242, 1000.5, since, since + 0.5) is None
    assert replayed == shown
    assert set(shown[:25]) == {DATA_WAIT} and shown[-1] == IDLE, shown


@pytest.mark.parametrize("entries", [None, ProcessEntries()])
def test_a_quiet_gpu_before_a_stack_reads_what_its_stacks_said_in_earlier_quiet_stretches(
        entries):
    """A job that computes about half the time and saves a checkpoint the other half, in the
    first seconds of a save (its GPU quiet, no window open yet, or one open with no stack in it
    yet): `compute` from its balance's top was beside a 0% SM share (seen in the demo, ticks 38
    and 40). It is what its stacks said while its GPU was quiet before: checkpoint."""
    balance = {COMPUTE: {"seconds": 54.0, "share": 0.54, "top_stacks": [],
                         "confidence": HIGH_CONFIDENCE},
               CHECKPOINT: {"seconds": 40.0, "share": 0.40, "top_stacks": [STACK],
                            "confidence": HIGH_CONFIDENCE},
               DATA_WAIT: {"seconds": 6.0, "share": 0.06, "top_stacks": [STACK],
                           "confidence": HIGH_CONFIDENCE}}
    quiet = _document((0.0,), balance, entries=entries)
    assert (quiet["phase"], quiet["phase_now"]) == (COMPUTE, CHECKPOINT)
    assert _column(quiet, gpus_idle=True) == CHECKPOINT
    assert Process.from_dict(quiet).current_phase == (CHECKPOINT, HIGH_CONFIDENCE)
    opened = _document((0.0,), balance, window=True, entries=entries)
    assert opened["phase_now"] == CHECKPOINT
    # the stack sampled in the window says otherwise: it wins
    assert _document((0.0,), balance, window=True, latest=DATA_WAIT,
                     entries=entries)["phase_now"] == DATA_WAIT
    # at work: compute
    assert _document((90.0,), balance, entries=entries)["phase_now"] == COMPUTE
    # decided from /proc alone: the quiet phase keeps its low confidence, in the column too
    low = {phase: dict(part, confidence=LOW_CONFIDENCE) for phase, part in balance.items()}
    entry = _document((0.0,), low, entries=entries)
    assert entry["phase_now"] == CHECKPOINT
    assert Process.from_dict(entry).current_phase == (CHECKPOINT, LOW_CONFIDENCE)
    assert _column(entry, gpus_idle=True) == CHECKPOINT + "~"


def test_a_process_on_several_gpus_works_by_its_mean_share():
    # 4 x 20 %: summed 80 % (sm_share), but each GPU under the working share
    assert _document((20.0,) * 4, _balance(DATA_WAIT))["phase_now"] == DATA_WAIT
    assert _document((85.0,) * 4, _balance(DATA_WAIT))["phase_now"] == COMPUTE


def test_kept_entries_follow_the_share_from_tick_to_tick():
    entries = ProcessEntries()
    balance = _balance(IDLE)  # the same object each tick: the kept template is reused
    assert _document((0.0,), balance, window=True, entries=entries)["phase_now"] == IDLE
    assert _document((95.0,), balance, entries=entries)["phase_now"] == COMPUTE
    assert _document((0.0,), balance, window=True, entries=entries)["phase_now"] == IDLE
    # the same keys in the same order, kept or built anew (process_entry)
    assert list(_document((95.0,), balance, entries=entries)) == list(
        _document((95.0,), balance, entries=None))


def test_an_older_daemons_document_shows_its_phase():
    entry = _document((95.0,), _balance(IDLE))
    del entry["phase_now"]
    shown = Process.from_dict(entry)
    assert shown.phase_now == IDLE and shown.current_phase == (IDLE, HIGH_CONFIDENCE)


def replayed_at(daemon, tmp_path, at: float) -> dict[str, dict]:
    """The processes of a replay of the stopped daemon's store (a copy) at `at`, by key."""
    assert daemon.stop() == 0, daemon.log_tail()
    copy = tmp_path / "copy.db"
    source = sqlite3.connect(daemon.db)
    source.execute("VACUUM INTO ?", (str(copy),))
    source.close()
    with Replay(copy) as replay:
        return {p["key"]: p for p in replay.state_at(at)["processes"]}


def one_gpu_daemon(mlcostd, tmp_path, name: str, args: list[str]):
    """A daemon on a simulated one-A100 host running `python ARGS` as workload `name`, its
    stacks dumped every second once its GPU is quiet for 2 s."""
    scenario = tmp_path / f"{name}.toml"
    scenario.write_text(
        '[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
        '[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = 1\n'
        f'[[workloads]]\nname = "{name}"\ngpus = [0]\n'
        f"command = {json.dumps([sys.executable, *args])}\n")
    return mlcostd("idle-host", interval=1.0, config={
        "attribution": {"dump_interval": "1s", "dumps_per_second": 5, "cpu_budget": 0.3,
                        "min_window": "2s"}},
        args=["--simulate", str(scenario)])


TOGGLE = textwrap.dedent("""
    import os, sys, time
    from daemon.sim.device import Device
    go = sys.argv[1]
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        while not os.path.exists(go):  # holds its GPU idle until told
            time.sleep(0.2)
        gpu.launch(0.95)  # then keeps it busy
        while True:
            time.sleep(1)
""")


def test_a_live_process_back_at_work_reads_compute_while_its_balance_says_idle(
        mlcostd, tmp_path):
    """A real daemon, a real process on a simulated GPU: idle long enough for its stacks to say
    `idle`, then at 95% SM. /v1/now keeps the window's balance (`phase` idle, what the rules
    read) and says `phase_now` compute; mlcost-top's column shows compute."""
    go = tmp_path / "go"
    program = tmp_path / "toggle.py"
    program.write_text(TOGGLE)
    daemon = one_gpu_daemon(mlcostd, tmp_path, "toggle", [str(program), str(go)])
    state: dict = {}

    def toggle() -> dict | None:
        now = daemon.now()
        state["now"] = now
        return next((p for p in now["processes"] if "toggle.py" in p["command"]), None)

    def idle_a_while() -> bool:
        proc, now = toggle(), state["now"]
        if proc is None or proc["phase"] != IDLE or proc["phase_now"] != IDLE:
            return False
        window = next((w for w in now["windows"] if w["target"] == proc["key"]), None)
        return window is not None and now["ts"] - window["started_at"] >= 20

    explain = lambda: json.dumps(state.get("now"), indent=1)[-4000:]  # noqa: E731
    poll(idle_a_while, 120, "the held GPU's window sampled as idle for 20 s", explain=explain)
    go.write_text("")

    def at_work() -> dict | None:
        proc, now = toggle(), state["now"]
        working = (proc is not None and (proc["sm_share"] or 0) >= 90
                   and all(w["target"] != proc["key"] for w in now["windows"]))
        return proc if working else None

    proc = poll(at_work, 60, "the process at 95% SM, its window closed", explain=explain)
    # its stacks, all from the quiet 20 s and more, still outweigh the few seconds of compute
    assert proc["phase"] == IDLE, proc["phases"]
    assert proc["phase_now"] == COMPUTE
    assert _column(proc) == COMPUTE


def test_a_live_job_writing_a_checkpoint_reads_checkpoint_while_its_balance_says_compute(
        mlcostd, tmp_path):
    """Probe 141 M1 live: the simulator's checkpoint-heavy job (160 MiB at 40 MB/s: each save
    stalls its GPU ~4 s; it computes more than it saves). While a save holds its GPU idle and
    the stack sampled last says checkpoint, /v1/now's phase_now (mlcost-top's column) says
    checkpoint, its balance compute. The old code said compute there (the column: idle)."""
    scenario = tmp_path / "checkpoints.toml"
    scenario.write_text(
        '[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
        '[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = 1\n'
        '[[workloads]]\nname = "train-checkpoints"\nprogram = "checkpoint_heavy"\n'
        'gpus = [0]\noptions = { checkpoint_mib = 160, write_mbps = 40 }\n')
    daemon = mlcostd("idle-host", interval=1.0, config={
        "attribution": {"dump_interval": "1s", "dumps_per_second": 5, "cpu_budget": 0.3,
                        "min_window": "2s"}},
        args=["--simulate", str(scenario)])
    state: dict = {}

    def saving_now() -> dict | None:
        now = state["now"] = daemon.now()
        proc = next((p for p in now["processes"] if "checkpoint_heavy" in p["command"]), None)
        in_window = proc is not None and any(w["target"] == proc["key"] for w in now["windows"])
        if in_window and proc["phase"] == COMPUTE and proc["phase_now"] == CHECKPOINT:
            return proc
        return None

    proc = poll(saving_now, 150, "the job in a save, its balance compute, phase_now checkpoint",
                explain=lambda: json.dumps(state.get("now"), indent=1)[-4000:])
    assert _column(proc, gpus_idle=True) == CHECKPOINT
    # replay of the store at that tick says the same (its window, the stack sampled last in it)
    at = state["now"]["ts"]
    replayed = replayed_at(daemon, tmp_path, at)
    assert replayed[proc["key"]]["phase_now"] == CHECKPOINT


SERVER = textwrap.dedent("""
    import socket
    from daemon.sim.device import Device
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        gpu.launch(0.10)  # its GPU busy the whole time, at a sliver of its SMs (batch size 1)
        waiting, _ = socket.socketpair()
        waiting.recv(1)  # between requests: one that never comes
""")


def test_a_live_server_on_its_busy_gpu_between_requests_reads_compute(mlcostd, tmp_path):
    """Probe 148 M3 live: a real process keeps its simulated GPU 100% busy at 10% of its SMs
    (a low-utilization window opens and stays open) while its main thread waits on a socket
    for a request: its stacks say idle, its balance is idle. The old code gave the window's last
    stack, `idle`, as phase_now (the column: idle beside a busy GPU); it reads compute, in a
    replay of the store at that tick too."""
    program = tmp_path / "server.py"
    program.write_text(SERVER)
    daemon = one_gpu_daemon(mlcostd, tmp_path, "server", [str(program)])
    state: dict = {}

    def sampled_idle_in_its_window() -> dict | None:
        now = state["now"] = daemon.now()
        proc = next((p for p in now["processes"] if "server.py" in p["command"]), None)
        if proc is None or proc["phase"] != IDLE:
            return None
        busy = all(g["busy"] for g in now["gpus"])
        in_window = any(w["target"] == proc["key"] for w in now["windows"])
        return proc if busy and in_window else None

    proc = poll(sampled_idle_in_its_window, 120,
                "the server's window open, its stacks idle, its GPU busy",
                explain=lambda: json.dumps(state.get("now"), indent=1)[-4000:])
    assert proc["phase_now"] == COMPUTE, proc["phase_reasons"]
    assert _column(proc) == COMPUTE
    at = state["now"]["ts"]
    replayed = replayed_at(daemon, tmp_path, at)
    assert replayed[proc["key"]]["phase"] == IDLE
    assert replayed[proc["key"]]["phase_now"] == COMPUTE
