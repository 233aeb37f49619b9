"""`mlcostd profile`'s recording: one command, run under the daemon itself, its process tree only.

The Daemon (runtime/daemon.py) records as it always does — NVML (or the simulated NVML), /proc,
py-spy — with four settings: a process filter that keeps the command's tree (ProcessTree), no
API, stacks sampled from the tree's first tick on, and the rules run once at the end over the
whole run. This module starts the recorder, then the command (in a session and process group of
its own, its output passed through unchanged and scanned for progress), stops the command after
`duration` (SIGTERM to its group, then SIGKILL), stops whatever it left running (the profile is a
child subreaper, so that includes helpers it daemonized), runs the rules, and stops the
recorder. What the profile document says about the run is in commands/profile.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from daemon import clock
from daemon.analysis.kinds import kind_documents
from daemon.analysis.latency import reading as latency_reading
from daemon.analysis.latency import zero_reading
from daemon.config import Config
from daemon.lifetime import become_subreaper, die_with_parent
from daemon.runtime.daemon import Daemon
from daemon.runtime.streams import to_devnull
from daemon.sources.sample import GpuUse, Sample

log = logging.getLogger(__name__)

NVML_UNAVAILABLE = "NVML unavailable: "  # how NvmlSource.status begins where it cannot start
STOP_GRACE_S = 5.0  # SIGTERM, then this long, then SIGKILL
# Once the command exited, what it started gets this long to exit by itself before it is
# stopped: multiprocessing's resource tracker (every 'spawn' or 'forkserver' start has one)
# exits when it reads the end of its parent's pipe, moments after the parent exits.
LEFTOVER_GRACE_S = 2.0
LEFTOVER_POLL_S = 0.05
MAX_LEFTOVERS_NAMED = 10  # of the processes stopped, this many are named (pid and command)
TREE_REFRESH_S = 1.0  # the command's process tree is re-read at most this often
OUTPUT_DRAIN_S = 5.0  # after the command is gone, its output pipes get this long to close
MAX_LINE_BYTES = 4096  # of each output line, only this much is matched against --progress
MAX_TIMELINE_POINTS = 2000  # (seconds, steps) points kept for the document
LATENCY_POLL_S = 1.0  # latency histograms are read this often while the command runs
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class ProgressCounter:
    """Steps from the command's own output: `regex` matched against each line (a carriage
    return ends a line too, as tqdm redraws with one), each stream's lines apart (a line cut
    by a chunk of stdout is not joined to stderr's). Without a group, each match counts one
    step. With a group, the group is a step number, read in runs (`_Numbers`): a number
    that falls back to at most half the run's largest (30/60 after 60/60, `epoch 2 step
    10/100`: a bar or a log per epoch) starts a new run, and the steps are the sum of each
    run's largest number; a counter that only rises is one run, its largest number the count.

    The output is hostile and may be huge: each line is matched on its first MAX_LINE_BYTES
    only, so a 64 KiB line costs what a 4 KiB one does."""

    def __init__(self, regex: str | None) -> None:
        self.pattern = re.compile(regex) if regex else None
        self.numbered = bool(self.pattern and self.pattern.groups)
        self.steps = 0
        self.lines = 0  # lines the pattern matched (none: it may not be the command's format)
        self.first_step_at: float | None = None
        self.timeline: list[tuple[float, int]] = []  # (ts, steps) whenever the count rose
        self.numbers = _Numbers()
        self._lines: dict[int, bytearray] = {}  # stream -> its line so far
        self._cut: set[int] = set()  # streams whose line is past MAX_LINE_BYTES: not kept

    @property
    def restarts(self) -> int:
        """How many times the step number started over (a new run of steps, added)."""
        return self.numbers.restarts

    def feed(self, chunk: bytes, ts: float, stream: int = 0) -> None:
        if self.pattern is None:
            return
        line = self._lines.setdefault(stream, bytearray())
        start = 0
        while start < len(chunk):
            ends = [i for i in (chunk.find(b"\n", start), chunk.find(b"\r", start)) if i >= 0]
            end = min(ends) if ends else -1
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if stream not in self._cut:
                room = MAX_LINE_BYTES - len(line)
                line += piece[:room]
                if len(piece) > room:
                    self._cut.add(stream)
            if end < 0:
                return
            self._match(stream, ts)
            start = end + 1

    def flush(self, ts: float) -> None:
        """The output ended: the last line of each stream without a newline counts too."""
        for stream, line in self._lines.items():
            if line:
                self._match(stream, ts)

    def _match(self, stream: int, ts: float) -> None:
        assert self.pattern is not None
        line = self._lines[stream]
        text = line.decode("utf-8", "replace")
        line.clear()
        self._cut.discard(stream)
        matches = list(self.pattern.finditer(text))
        self.lines += bool(matches)
        if self.numbered:
            for match in matches:
                try:
                    number = int(match.group(1))
                except (TypeError, ValueError):
                    continue  # the group is not a number here
                self.numbers.add(number)
            steps = self.numbers.total
        else:
            steps = self.steps + len(matches)
        if steps > self.steps:  # (a run of numbers dropped as an interlude lowers the total
            # for a while: the count shown waits until it rises past it again)
            self.steps = steps
            if self.first_step_at is None:
                self.first_step_at = ts
            if len(self.timeline) < MAX_TIMELINE_POINTS:
                self.timeline.append((ts, self.steps))
            else:
                self.timeline[-1] = (ts, self.steps)


MAX_RUNS_KEPT = 16  # runs of step numbers a later number may still resume; older are summed


class _Numbers:
    """Step numbers read in runs, each rising. A number equal to the last is the same step
    (tqdm redraws one step's bar several times). A number below the last:
      - at most half of the current run's largest starts a new run (a bar per epoch: 1/60
        after 60/60; a log per epoch: `epoch 2 step 10/100` after `epoch 1 step 100/100`);
      - above that half, is not a step (two writers a step or two apart, one line late).
    A number that rises past the run before, when the current run is short beside it (under
    half its last number) and began below it, resumes that run: the current one was an
    interlude (an evaluation bar, 1/10 to 10/10, inside a training bar that counts the whole
    run's steps: 30/600, then 31/600) or a stray match, and is not counted. The total is the
    sum of the counted runs' largest numbers."""

    def __init__(self) -> None:
        self.restarts = 0  # runs started after the first, counted (not interludes)
        self._done = 0  # the largest numbers of the runs no longer resumable, summed
        self._runs: list[list[int]] = []  # earlier runs that may be resumed: [last, largest]
        self._last: int | None = None  # the current run's
        self._largest = 0

    @property
    def total(self) -> int:
        return self._done + sum(largest for _, largest in self._runs) + self._largest

    def add(self, number: int) -> None:
        if number < 0:
            return
        last = self._last
        if last is None:
            self._last = self._largest = number
            return
        if number == last:
            return
        if number < last:
            if 2 * number > self._largest:
                return  # a step or two back: not a new run
            self._runs.append([last, self._largest])
            if len(self._runs) > MAX_RUNS_KEPT:
                self._done += self._runs.pop(0)[1]
            self.restarts += 1
            self._last = self._largest = number
            return
        if self._runs:
            before_last, _ = self._runs[-1]
            if last < before_last < number and 2 * self._largest <= before_last:
                _, before_largest = self._runs.pop()  # this run was an interlude
                self.restarts -= 1
                self._last, self._largest = number, max(before_largest, number)
                return
        self._last, self._largest = number, max(self._largest, number)


class ProcessTree:
    """The command's processes: its root, the root's descendants, the orphans among them (the
    profile is a child subreaper: a helper daemonized by a double fork is re-parented to it, not
    to init, however soon its parent exits), and any GPU process in the root's session. Used as
    the daemon's process filter: it keeps the tree's GPU uses, adds the tree's other processes
    with no uses (so the command is recorded before it touches a GPU), and notes every other
    process on a GPU (is the GPU shared?)."""

    def __init__(self) -> None:
        self.root: psutil.Process | None = None
        self.members: dict[int, psutil.Process] = {}
        self.gpus: set[int] = set()  # GPUs the tree used
        self.others_by_gpu: dict[int, set[int]] = {}  # GPU -> pids outside the tree on it
        self._read_at = -1e9
        # The profile's own children when the command started (the simulated host's
        # workloads) and their sessions: an orphan re-parented to the profile from one of
        # them is not the command's.
        self._own: set[int] = set()
        self._own_sessions: set[int] = set()

    def start(self, pid: int) -> None:
        try:
            self.root = psutil.Process(pid)
        except psutil.Error:
            self.root = None
            return
        self.members = {pid: self.root}
        self._read_at = -1e9
        self._own = {c.pid for c in psutil.Process().children() if c.pid != pid}
        self._own_sessions = {s for s in map(_session, self._own) if s is not None}

    def _adopted(self) -> list[psutil.Process]:
        """The command's orphans, re-parented to the profile: its children that it did not
        start. Its own (py-spy) run in its session; the command runs in a session of its own,
        and its orphans in that one or in one they made. Those that exited are reaped here."""
        own_session = os.getsid(0)
        found = []
        for child in psutil.Process().children():
            pid = child.pid
            if (self.root is None or pid == self.root.pid or pid in self._own
                    or _session(pid) in (own_session, *self._own_sessions)):
                continue
            if not _running(child):
                _reap(pid)
                continue
            found.append(child)
        return found

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if (not force and now - self._read_at < TREE_REFRESH_S) or self.root is None:
            return
        self._read_at = now
        alive = {pid: p for pid, p in self.members.items() if p.is_running()}
        tops = [self.root, *self._adopted()]
        for top in tops:
            alive.setdefault(top.pid, top)
            try:
                for child in top.children(recursive=True):
                    alive.setdefault(child.pid, child)
            except psutil.Error:
                pass  # gone: its orphans are still members while they run
        self.members = alive

    def _in_session(self, pid: int) -> bool:
        if self.root is None:
            return False
        try:
            if os.getsid(pid) != self.root.pid:
                return False
            self.members[pid] = psutil.Process(pid)
            return True
        except (OSError, psutil.Error):
            return False

    def filter(self, uses: dict[int, tuple[GpuUse, ...]]) -> dict[int, tuple[GpuUse, ...]]:
        self._refresh()
        kept = {pid: uses.get(pid, ()) for pid in self.members}
        for pid, held in uses.items():
            if pid in kept:
                continue
            if self._in_session(pid):
                kept[pid] = held
                continue
            for use in held:
                self.others_by_gpu.setdefault(use.gpu_index, set()).add(pid)
        for held in kept.values():
            self.gpus.update(use.gpu_index for use in held)
        return kept

    def shared_with(self) -> dict[int, list[int]]:
        """The GPUs the tree used that processes outside it used too: GPU -> their pids."""
        return {gpu: sorted(self.others_by_gpu[gpu]) for gpu in sorted(self.gpus)
                if self.others_by_gpu.get(gpu)}

    def leftovers(self) -> list[psutil.Process]:
        """Processes of the tree (its orphans too), its process group or its session still
        running."""
        self._refresh(force=True)
        found = {pid: p for pid, p in self.members.items() if p.is_running()}
        if self.root is not None:
            for proc in psutil.process_iter():
                try:
                    if self.root.pid in (os.getpgid(proc.pid), os.getsid(proc.pid)):
                        found.setdefault(proc.pid, proc)
                except (OSError, psutil.Error):
                    continue
        found.pop(os.getpid(), None)
        return [p for p in found.values() if _running(p)]


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _reap(pid: int) -> None:
    """Collect an exited orphan the profile adopted (no one else waits for it)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class RunResult:
    """What the recording of one command saw, beside what the store holds."""

    argv: list[str]
    started_at: float = 0.0
    ended_at: float = 0.0
    exit_status: int | None = None  # the command's; 128 + N when a signal N ended it
    exit_signal: int | None = None  # N when a signal N ended it (exit_status is 128 + N)
    stopped_after_duration: bool = False
    interrupted: bool = False  # SIGINT/SIGTERM reached the profile
    killed_after_signal: bool = False  # its process group was sent SIGKILL: the command
    # outlived a SIGINT/SIGTERM (the profile's, or --duration's) by STOP_GRACE_S, or a second
    # one came
    killed_on_second_signal: bool = False  # a second SIGINT/SIGTERM killed it at once
    interrupted_by: int | None = None  # the first of them; before the command started, the
    # command is not started (exit_status stays None) and the profile exits 128 + it
    signal_after_exit: int | None = None  # the first SIGINT/SIGTERM after the command exited:
    # it reached no command; the profile writes its files whole, then exits 128 + it
    progress: str | None = None  # --progress REGEX
    progress_lines: int = 0  # lines of the command's output it matched
    progress_restarts: int = 0  # times the step number started over (runs added)
    steps: int = 0
    first_step_at: float | None = None
    step_timeline: list[tuple[float, int]] = field(default_factory=list)
    first_gpu_work_at: float | None = None  # first tick the tree's GPU processes ran kernels
    shared_gpus: dict[int, list[int]] = field(default_factory=dict)
    left_running: int = 0  # processes still running LEFTOVER_GRACE_S after the command
    # exited, stopped
    # The first MAX_LEFTOVERS_NAMED of them: (pid, argv), the argv as read (hostile: redacted
    # and escaped where shown)
    left_running_named: list[tuple[int, list[str]]] = field(default_factory=list)
    unit_costs: list[dict[str, Any]] = field(default_factory=list)
    # Each GPU process's workload kind as last classified while it ran ('pid:start_time' ->
    # its kind document): the daemon keeps the kinds of running processes only.
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    recommendations: int = 0  # found by the rules over the whole run
    error: str | None = None  # the command could not be started

    @property
    def exit_signal_name(self) -> str | None:
        """The signal that ended the command, by name ("SIGSEGV"); None when it exited."""
        return None if self.exit_signal is None else signal_name(self.exit_signal)


def signal_name(signum: int) -> str:
    """"SIGSEGV"; a real-time signal as "SIGRTMIN+3"; one Python does not name, "signal 99"."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
        return f"SIGRTMIN+{signum - low}" if low < signum < high else f"signal {signum}"


class ProfileRecorder:
    """Record one command under a Daemon with the profile's settings (see the module doc)."""

    def __init__(self, config: Config, argv: Sequence[str], *, simulate: str | None = None,
                 duration_s: float | None = None, progress: str | None = None,
                 signals_before: Sequence[int] = ()) -> None:
        """`signals_before`: SIGINT/SIGTERM that came before `run` took the signals over (the
        caller's handlers append to it until then): each is acted on then, as if it came
        while the recorder started."""
        self.config = config
        self._signals_before = signals_before
        self.result = RunResult(argv=list(argv), progress=progress)
        self.duration_s = duration_s
        self.progress = ProgressCounter(progress)
        self.tree = ProcessTree()
        self.daemon = Daemon(config, simulate=simulate, on_tick=self._on_tick,
                             process_filter=self.tree.filter, serve_api=False,
                             sample_stacks_always=True, periodic_rules=False,
                             stop_on_signals=False, out_option="--out")
        self.daemon.nvml.log_unavailable = False  # (said once, in the profile's words: run)
        self._ticked = asyncio.Event()
        # The command's output as passed on: each stream's last chunk did not end a line
        # (fd -> True), and which stream was written last; what the profile says on stderr
        # starts on a line of its own (`fresh_line`).
        self._unended: dict[int, bool] = {}
        self._last_fd: int | None = None
        self._one_file = _same_file(sys.stdout, sys.stderr)
        self._ended_mono: float | None = None  # time.monotonic() when the command ended
        self._group: int | None = None

    def _on_tick(self, sample: Sample) -> None:
        if self.result.first_gpu_work_at is None and self.result.started_at and any(
                use.sm_share > 0 for proc in sample.processes for use in proc.gpus):
            self.result.first_gpu_work_at = sample.ts
        if self.daemon.kinds.kinds:
            self.result.kinds.update(kind_documents(self.daemon.kinds.kinds))
        self._ticked.set()

    async def _next_tick(self) -> None:
        self._ticked.clear()
        await asyncio.wait_for(self._ticked.wait(),
                               timeout=10 * self.config.daemon.interval + 10)

    async def _tick_after_end(self, most: int = 5) -> None:
        """The next tick once every GPU was read after the command ended (at most `most`
        ticks on): the record then ends with the GPUs as the command left them. A GPU is read
        a little before each tick, and on a loaded host later still: the tick right after the
        end could show the memory the command had freed (a CI run's profile said 8 GiB in use
        after its script had exited)."""
        nvml, ended = self.daemon.nvml, self._ended_mono
        for _ in range(most):
            if ended is None or all((nvml.read_at(index) or 0.0) > ended
                                    for index in range(nvml.gpu_count or 0)):
                break
            await self._next_tick()
        await self._next_tick()

    async def run(self) -> RunResult:
        """Start the recorder, run the command, stop both. Raises DaemonError when the
        recorder cannot start (nothing of the command ran then).

        SIGINT and SIGTERM are the profile's from here on (`_interrupt`), not the recorder's:
        one before the command starts leaves it unstarted, and the recorder records on until
        this stops it, so the store ends as it does after any run."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._interrupt, signum)
        for early in list(self._signals_before):  # (no more come there: the loop has them)
            self._interrupt(early)
        recording = asyncio.create_task(self.daemon.run(), name="recorder")
        ready = asyncio.create_task(self.daemon.ready.wait())
        await asyncio.wait({recording, ready}, return_when=asyncio.FIRST_COMPLETED)
        if recording.done():
            ready.cancel()
            recording.result()  # raises DaemonError
            raise RuntimeError("the recorder stopped before it started")
        try:
            await self._say_if_no_nvml()
            await self._next_tick()
            await self._run_command()
            if self.result.exit_status is not None:
                await self._tick_after_end()  # the command's end is in the record
                found = await self.daemon.evaluate(self.result.started_at, clock.now())
                self.result.recommendations = len(found)
                await self._next_tick()  # the record reaches past the rules' round
                if self.daemon.analyzer is not None:
                    self.result.unit_costs = self.daemon.analyzer.ledger.as_dict()["unit_costs"]
        finally:
            self.daemon.request_stop()
            await recording
        self.result.shared_gpus = self.tree.shared_with()
        return self.result

    async def _say_if_no_nvml(self) -> None:
        """Where NVML cannot start (a CI runner without the NVIDIA driver, no --simulate),
        say so once, before the command runs, in the profile's words: the daemon's "retrying
        in 1 s" is a service's; a profile records one run, and what it cannot read then it
        cannot count (its verdict says so again)."""
        nvml = self.daemon.nvml
        await asyncio.to_thread(nvml.wait_ready,
                                self.config.daemon.interval + self.config.nvml.call_deadline)
        if nvml.status.startswith(NVML_UNAVAILABLE):
            why = nvml.status.removeprefix(NVML_UNAVAILABLE).split("; retrying")[0]
            log.warning("NVML unavailable (%s): no GPU will be read in this profile; the "
                        "run's cost and its GPUs are unknown, and gates on them fail", why)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        simulation = self.daemon.simulation
        if simulation is not None and simulation.state_dir:
            from daemon.sim.state import STATE_DIR_ENV

            env[STATE_DIR_ENV] = simulation.state_dir
            # The simulated GPU's client (daemon.sim.device) importable by the command.
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        # Its stdout and stderr are pipes (to the profile): a Python command's print() would be
        # block-buffered, all of it arriving at exit (probe 140 F6), and --progress's steps
        # with it. Unless the user set it either way.
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    async def _run_command(self) -> None:
        result = self.result
        if result.interrupted:  # Ctrl-C or SIGTERM before it started: it is not started
            result.started_at = result.ended_at = clock.now()
            return
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()
        if not become_subreaper():
            log.info("no child subreaper here: a helper the command daemonizes may go unseen")
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _Protocol(exited, limit=1 << 16, loop=loop), *result.argv,
                stdin=None, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=self._environment(), start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM))
        except OSError as exc:  # not started: the profile says so in its files, as of a run
            result.error = f"cannot run {result.argv[0]!r}: {exc.strerror or exc}"
            result.started_at = result.ended_at = clock.now()
            return
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        result.started_at = clock.now()
        self._group = proc.pid
        self._exited = exited
        if result.interrupted_by is not None:  # it came while the command was being started
            _signal_group(proc.pid, result.interrupted_by)
            self._kill_later()
        self.tree.start(proc.pid)
        await self.daemon.discover()  # recorded from its first tick, not the next round's
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [asyncio.create_task(self._pump(proc.stdout, sys.stdout.buffer, 1, transport)),
                 asyncio.create_task(self._pump(proc.stderr, sys.stderr.buffer, 2, transport))]
        latency = asyncio.create_task(self._read_latency(exited))
        try:
            await asyncio.wait_for(asyncio.shield(exited), self.duration_s)
        except asyncio.TimeoutError:
            result.stopped_after_duration = True
            log.info("--duration reached: stopping the command (SIGTERM to its process group)")
            await self._stop_group(exited)
        result.ended_at = clock.now()
        self._ended_mono = time.monotonic()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        latency.cancel()
        code = proc.returncode
        assert code is not None  # it exited: _Protocol said so
        result.exit_status = 128 - code if code < 0 else code
        result.exit_signal = -code if code < 0 else None
        result.left_running = await asyncio.to_thread(self._stop_leftovers)
        _, pending = await asyncio.wait(pumps, timeout=OUTPUT_DRAIN_S)
        for task in pending:  # a process that escaped even the leftovers holds the pipes
            task.cancel()
        transport.close()
        self.fresh_line()  # what the profile says next starts a line
        self.progress.flush(clock.now())
        result.steps = self.progress.steps
        result.progress_restarts = self.progress.restarts
        result.progress_lines = self.progress.lines
        result.first_step_at = self.progress.first_step_at
        result.step_timeline = list(self.progress.timeline)

    async def _read_latency(self, exited: asyncio.Future[None]) -> None:
        """Read the latency histograms (--latency, [[cost.latency]]) every LATENCY_POLL_S
        while the command runs, into the store; p50/p99 are of the requests between the
        readings. A server not there at the command's start (the command starts it) counted
        nothing then: a zero reading at the start makes its first second's requests count."""
        absent_at_start: set[str] | None = None
        while not exited.done():
            try:
                meters = await self.daemon.record_latency()
                if absent_at_start is None:
                    absent_at_start = {m.url for m in meters if m.error is not None}
                for meter in meters:
                    row = latency_reading(meter)
                    if row is not None and meter.url in absent_at_start:
                        absent_at_start.discard(meter.url)
                        self.daemon.record_meter_readings(self.result.started_at,
                                                          [zero_reading(row)])
            except Exception:  # a reading is a convenience: never the profile's end
                log.exception("reading the latency histograms failed")
            await asyncio.wait({exited}, timeout=LATENCY_POLL_S)

    async def _pump(self, stream: asyncio.StreamReader, out: BinaryIO, fd: int,
                    transport: asyncio.SubprocessTransport) -> None:
        """The command's output to ours, unchanged, as it comes; counted on the way. When ours
        is closed (`mlcostd profile -- yes | head -2`: head exited), the command's pipe is
        closed too, as a shell pipeline's would be: its next write gets SIGPIPE (or EPIPE
        where it ignores that; Python's print() raises BrokenPipeError), so it ends as it would
        without the profile rather than run on unseen (probe 140 F7)."""
        while True:
            chunk = await stream.read(1 << 16)
            if not chunk:
                return
            self.progress.feed(chunk, clock.now(), fd)
            # (in a thread: a slow reader must not stop the ticks)
            if not await asyncio.to_thread(_write, out, chunk):
                # Ours is closed, and with it the other when the two are one file (`2>&1 |
                # head`): the command's too. What is left in our buffer, and what the profile
                # says later, go to /dev/null rather than fail.
                closed = {1, 2} if self._one_file else {fd}
                for each in sorted(closed):
                    pipe = transport.get_pipe_transport(each)
                    if pipe is not None:
                        pipe.close()
                    to_devnull(sys.stdout.buffer if each == 1 else sys.stderr.buffer)
                if 2 not in closed:
                    log.info("the profile's stdout was closed: the command's is closed too, "
                             "as in a shell pipeline")
                return
            self._unended[fd] = not chunk.endswith(b"\n")
            self._last_fd = fd

    def fresh_line(self) -> None:
        """End the command's last line on stderr where it did not (`err no newline` then
        the verdict read `err no newlinemlcostd profile: done`): on stderr's, or on stdout's
        when the two are one file (a terminal, `2>&1`) and stdout was written last."""
        last = 2 if not self._one_file else self._last_fd
        if last is not None and self._unended.get(last):
            _write(sys.stderr.buffer, b"\n")
            self._unended[last] = False

    def _interrupt(self, signum: int) -> None:
        """Ctrl-C or SIGTERM: passed to the command's group (the profile then writes what it
        saw); SIGKILL to the group STOP_GRACE_S later if the command has not exited by then
        (a supervisor, docker stop or Kubernetes, sends one SIGTERM and SIGKILLs the profile
        some seconds on: a command that ignores it must not keep the profile from writing its
        files), or at once on a second one. Before the command started, the command is not
        started. After it exited the run was whole: the signal is the profile's exit status
        (what it left running in its group still gets it)."""
        if self.result.exit_status is not None:
            if self.result.signal_after_exit is None:
                self.result.signal_after_exit = signum
        else:
            self.result.interrupted = True
            if self.result.interrupted_by is None:
                self.result.interrupted_by = signum
        if self._group is not None:
            if not self._interrupted_once:
                _signal_group(self._group, signum)
                if self.result.exit_status is None:
                    self._kill_later()
            elif self._exited is not None and not self._exited.done():
                if not self.result.killed_after_signal:  # (not the 5 s timer's already)
                    self.result.killed_on_second_signal = True
                self._kill(f"got a second {signal.Signals(signum).name}")
            else:  # (what it left running in its group)
                _signal_group(self._group, signal.SIGKILL)
        self._interrupted_once = True

    _interrupted_once = False
    _exited: asyncio.Future[None] | None = None
    _kill_timer: asyncio.TimerHandle | None = None

    def _kill_later(self) -> None:
        """SIGKILL to the command's group STOP_GRACE_S from now, if it has not exited then."""
        if self._kill_timer is None:
            self._kill_timer = asyncio.get_running_loop().call_later(
                STOP_GRACE_S, self._kill_if_running)

    def _kill_if_running(self) -> None:
        if self._group is None or self._exited is None or self._exited.done():
            return
        self._kill(f"did not exit within {STOP_GRACE_S:.0f} s of "
                   f"{signal.Signals(self.result.interrupted_by or signal.SIGTERM).name}")

    def _kill(self, reason: str) -> None:
        """SIGKILL to the command's group, said on stderr and in the result (every path that
        kills it: a signal outlived, a second one, --duration's SIGTERM outlived)."""
        if self._group is None:
            return
        if not self.result.killed_after_signal:
            self.result.killed_after_signal = True
            self.fresh_line()
            log.warning("the command %s: SIGKILL to its process group", reason)
        _signal_group(self._group, signal.SIGKILL)

    async def _stop_group(self, exited: asyncio.Future[None]) -> None:
        """SIGTERM to the command's process group; SIGKILL when it has not exited in time."""
        if self._group is None:
            return
        _signal_group(self._group, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(exited), STOP_GRACE_S)
        except asyncio.TimeoutError:
            self._kill(f"did not exit within {STOP_GRACE_S:.0f} s of --duration's SIGTERM")
            await exited

    def _stop_leftovers(self) -> int:
        """Stop what the command left running (SIGTERM, then SIGKILL); how many there were.
        What exits by itself within LEFTOVER_GRACE_S of the command's exit was not left
        running (multiprocessing's resource tracker). Those stopped are named in the result.
        Blocking: run it in a thread."""
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        left = self.tree.leftovers()
        while left and time.monotonic() < deadline:
            time.sleep(LEFTOVER_POLL_S)
            left = self.tree.leftovers()
        if not left:
            return 0
        log.info("the command left %d processes running; stopping them", len(left))
        for proc in sorted(left, key=lambda p: p.pid)[:MAX_LEFTOVERS_NAMED]:
            self.result.left_running_named.append((proc.pid, _argv(proc)))
        for proc in left:
            _signal(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs(left, timeout=STOP_GRACE_S)
        for proc in alive:
            _signal(proc, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=STOP_GRACE_S)
        return len(left)


def _argv(proc: psutil.Process) -> list[str]:
    """A process's command line, or its [name] when it cannot be read (or is empty)."""
    try:
        argv = proc.cmdline()
        return argv if argv else [f"[{proc.name()}]"]
    except psutil.Error:
        return ["[?]"]


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's protocol for a subprocess with pipes, that also says when the process exits:
    Process.wait() waits for its pipes to close too, which a process it left running (holding
    them) would put off for good."""

    def __init__(self, exited: asyncio.Future[None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._exited_future = exited

    def process_exited(self) -> None:
        super().process_exited()
        if not self._exited_future.done():
            self._exited_future.set_result(None)


def _write(out: BinaryIO, chunk: bytes) -> bool:
    """Whether `chunk` was written: False when our own output is closed (a pipe whose reader
    exited)."""
    try:
        out.write(chunk)
        out.flush()
    except (BrokenPipeError, ValueError):
        return False
    return True


def _same_file(one: Any, other: Any) -> bool:
    """Whether two of our streams write to one file (a terminal, `2>&1`)."""
    try:
        a, b = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(proc: psutil.Process, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except psutil.Error:
        pass
