"""The API's wire types, defined once: the daemon serves these shapes, the client and TUI read them.

Every type is a frozen dataclass with `from_dict`, which accepts documents from older and newer
daemons: a missing key reads as None (shown as "-"), an unknown key is ignored. Cost, phase and
recommendation keys arrive only once the daemon computes them, so all of them are optional.

Every string a wire type holds is safe to print: control bytes are shown as `\\x1b`, never
kept (daemon.sources.safe_text; re-exported here as `one_line` and `lines` for mlcost-top, which
reads the daemon only through this module). One-line fields (command, user, host name, owner,
target) show a newline as `\\n` too. The daemon cleans what it records, but a store written by
an older mlcostd, a snapshot from elsewhere or a daemon that is not ours may hold anything.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.clock import utc_day
from daemon.sources.safe_text import is_safe
from daemon.sources.safe_text import lines as lines
from daemon.sources.safe_text import one_line as one_line
from daemon.sources.safe_text import without_url_credentials as without_url_credentials

API_VERSION = 1


SOCKET_PATH_MAX = 107  # bytes in a Unix socket's path: sockaddr_un's sun_path (108) less its NUL
# The API's bearer token (a token file's text, stripped): what mlcostd accepts from its
# [api].token_file and what a client reads from --token-file.
TOKEN_MIN_CHARS = 16
TOKEN_MAX_BYTES = 4096


def default_socket_path() -> Path:
    """Where the API's unix socket lives when neither the config nor --socket says (here, not in
    daemon.config, so a client finds the daemon without loading the config and the catalog)."""
    if os.geteuid() == 0:
        return Path("/run/mlcost/mlcostd.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/mlcost-{os.geteuid()}"
    return Path(runtime) / "mlcost" / "mlcostd.sock"

def _f(value: Any) -> float | None:
    """A number or None (bools and strings are not numbers on this wire)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _i(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _b(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _s(value: Any, default: str = "") -> str:
    """A string, safe to print (newlines kept), or `default`."""
    return lines(value) if isinstance(value, str) else default


def _line(value: Any, default: str = "") -> str:
    """A one-line string (a command, a name), safe to print, or `default`."""
    return one_line(value) if isinstance(value, str) else default


def _text(value: Any) -> str | None:
    """An optional string, safe to print."""
    return lines(value) if isinstance(value, str) else None


# A process's phases (Process.phase, the keys of Process.phases), named once: the daemon's
# classifier (daemon.analysis.phases) decides them, reports and mlcost-top show them.
COMPUTE = "compute"
DATA_WAIT = "data_wait"
HOST_PREPROCESS = "host_preprocess"
CHECKPOINT = "checkpoint"
OUTPUT = "output"  # writing logs, metrics, predictions, embeddings: serialization plus writes
EVAL = "eval"
SYNC = "sync"
COMM = "comm"
IDLE = "idle"  # GPU memory held, nothing running
UNKNOWN = "unknown"
PHASES = (COMPUTE, DATA_WAIT, HOST_PREPROCESS, CHECKPOINT, OUTPUT, EVAL, SYNC, COMM, IDLE,
          UNKNOWN)

# Process.phase_now in an open low-utilization window: what most of its stack samples of the
# RECENT_PHASE_S up to its last one say. At one dump every 2 s, 15 samples, so a starved job
# that computes in one dump in six keeps reading data_wait, and a change that lasts takes about
# half of it to show. The live daemon (daemon.analysis.live_phases) and replay
# (daemon.store.queries) read it the same way.
RECENT_PHASE_S = 30.0

# How sure a phase is (Process.phase_confidence): "high" from Python stacks (or the GPU's own
# busy time), "low" from /proc alone where py-spy may not read the process.
HIGH_CONFIDENCE = "high"
LOW_CONFIDENCE = "low"
PHASE_CONFIDENCES = (HIGH_CONFIDENCE, LOW_CONFIDENCE)
# Shown after a phase decided from /proc alone (no stack): "data_wait~" (README "When ptrace is
# denied").
LOW_CONFIDENCE_MARK = "~"


def phase_label(phase: str | None, confidence: str | None) -> str:
    """A phase as a screen or a report shows it: marked when its confidence is low."""
    if phase is None:
        return "-"
    return phase + LOW_CONFIDENCE_MARK if confidence == LOW_CONFIDENCE else phase


# Below this `money(..., figures=N)` writes $0: a noise of 9.15e-15 (floating-point dust on
# an hour's burn that did not change) was printed `±$9.15e-15` by compare (probe 141 L7).
DOLLARS_SHOWN_FROM = 5e-7


def money(value: float | None, digits: int = 2, *, small: bool = False,
          significant: bool = False, whole_from: float | None = None, none: str = "-",
          figures: int | None = None) -> str:
    """Dollars, as every report, recommendation, snapshot, page and screen writes them (the one
    place that says how): '$1,234.56', '-$1.00', `none` when unknown. Below $1, `small` writes
    four decimals, where a short run's cost would read $0.00 (profiles and their gates:
    '$0.0022'); `significant` at least two significant digits (a page's $0.00012).
    `whole_from`: whole dollars from that amount up (a screen's '$12,345'). `figures`: that
    many significant digits, no trailing zeros and never an exponent, whole dollars from
    10**figures up and $0 below DOLLARS_SHOWN_FROM (compare's columns: '$0.0001235', '$0.5',
    '$1,235')."""
    if value is None or not math.isfinite(value):  # (an edited file's 1e308 - x is inf)
        return none
    amount = abs(value)
    if figures is not None:
        if amount < DOLLARS_SHOWN_FROM:
            return "$0"
        places = max(0, figures - 1 - math.floor(math.log10(amount)))
        text = f"{amount:,.{places}f}"
        text = text.rstrip("0").rstrip(".") if "." in text else text  # as %g: no 0.500
        return f"-${text}" if value < 0 else f"${text}"
    if whole_from is not None and amount >= whole_from:
        digits = 0
    elif small and amount < 1:
        digits = 4
    elif significant and 0 < amount < 1:
        digits = max(digits, 1 - math.floor(math.log10(amount)))
    if value < 0:
        return f"-${amount:,.{digits}f}"
    return f"${amount:,.{digits}f}"


ELLIPSIS = "…"


def program_words(command: str) -> list[str]:
    """The words of a command line that tell processes apart: the program's own name (no
    folder), and for an interpreter running a module or a script, that module's last part
    (`python -m pkg.workloads.data_starved` -> `python -m …data_starved`) or the script's
    file name."""
    words = command.split()
    if not words:
        return []
    words[0] = words[0].rsplit("/", 1)[-1]
    if words[0].startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2 and "." in words[2]:
            words[2] = ELLIPSIS + words[2].rsplit(".", 1)[-1]
        elif words[1].endswith(".py"):
            words[1] = words[1].rsplit("/", 1)[-1]
    return words


# Characters that take no cell of their own: combining marks (the accent of `e\u0301`),
# enclosing marks, format characters (zero-width joiner, bidi marks) and controls.
_ZERO_WIDTH_CATEGORIES = frozenset({"Mn", "Me", "Cf", "Cc"})


@functools.lru_cache(maxsize=4096)
def _char_cells(char: str) -> int:
    if char.isascii():
        return 1 if char.isprintable() else 0
    if unicodedata.category(char) in _ZERO_WIDTH_CATEGORIES:
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cells(text: str) -> int:
    """How many terminal cells `text` takes: wide characters (CJK, most emoji) two, combining
    marks and zero-width ones none, others one, as the terminal and mlcost-top's tables count
    them (the standard library's Unicode tables: the daemon loads no rich). `len()` counts
    code points: a command of CJK or emoji read shorter than it shows (probe 154 L1)."""
    if text.isascii():
        return sum(1 for c in text if c.isprintable()) if not text.isprintable() else len(text)
    return sum(_char_cells(c) for c in text)


def pad(text: str, width: int) -> str:
    """`text` then spaces to `width` cells (str.ljust counts code points: a wide character's
    row pushed the columns after it out of line)."""
    return text + " " * max(width - cells(text), 0)


def crop(text: str, width: int) -> str:
    """`text` in `width` cells, cut where the width ends with an ellipsis (a command's
    arguments are tokens, paths and flags: part of one tells more than none of it). Cells, not
    code points: a wide character takes two, a combining mark none."""
    if cells(text) <= width:
        return text
    room, used = max(width - 1, 0), 0
    for end, char in enumerate(text):
        size = _char_cells(char)
        if used + size > room:
            return text[:end] + ELLIPSIS[:width]
        used += size
    return text  # (not reached: the text is wider than `room`)


def short_command(command: str, width: int = 60) -> str:
    """A command line in `width` cells, what tells it apart first: the program and its module
    or script (see program_words), then its arguments, cut with an ellipsis. When even that
    does not fit, the interpreter goes (`…data_starved --gpu 1`). mlcost-top's columns and
    the reports' lines alike."""
    words = program_words(command)
    if not words:
        return crop(command, width)
    text = " ".join(words)
    # In a narrow column the interpreter goes (it is on every row; the module or script is
    # what differs): when it and its module would take over half the width.
    if cells(text) > width and words[0].startswith("python"):
        skip = 2 if len(words) > 2 and words[1] == "-m" else \
            1 if len(words) > 1 and words[1].endswith(".py") else 0
        if skip and cells(" ".join(words[: skip + 1])) > width // 2:
            text = " ".join(words[skip:])
    return crop(text, width)


def _confidence(value: Any) -> str | None:
    """A phase confidence the client knows, else None (a newer daemon's word is not guessed)."""
    return value if value in PHASE_CONFIDENCES else None


_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)
_JSON_CONTROL = re.compile(r"\\(?:u00[01]|[btnfr])")


def _tree(value: Any) -> Any:
    """A JSON value (evidence, an action, phases with their stacks) with every string in it,
    keys included, safe to print."""
    if isinstance(value, Mapping | list | tuple):
        # Nearly always there is nothing to change: one C-level encode and two scans say so,
        # where walking every frame of every stack in Python tripled the cost of a /v1/now.
        # JSON writes C0 controls as escapes (\\u001b, \\n): those are looked for too (a
        # typed backslash-n only costs the walk).
        try:
            encoded = _ENCODER.encode(value)
        except (TypeError, ValueError):
            encoded = "\\u0000"  # not plain JSON (a replayed value): walk it
        if is_safe(encoded) and _JSON_CONTROL.search(encoded) is None:
            return value
    return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return lines(value)
    if isinstance(value, Mapping):
        return {_walk(k) if isinstance(k, str) else k: _walk(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v) for v in value]
    return value


def _d(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


# Keys remembered: a tick spells each process's key ~4 times (the model, the cost, the phases,
# the kinds), at 0.57 us a formatting and 0.15 us a remembered one (measured). Bounded: a host
# that sees more processes than this formats the least recently used again.
PROCESS_KEYS_REMEMBERED = 4096


@functools.lru_cache(maxsize=PROCESS_KEYS_REMEMBERED)
def process_key(pid: int, start_time: float) -> str:
    """The one stable id of a process: 'pid:start_time', the start time to the millisecond (as
    the store keeps it). Every layer spells a process key with this function."""
    return f"{pid}:{start_time:.3f}"


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def signal_command(pid: int, start_time: float, signal: str = "TERM") -> str:
    """`kill -SIGNAL PID` for a person to paste into a shell, on one line, safe against the
    pid's reuse: it signals only while the pid's start time is the one mlcost saw (`ps -o
    lstart=`, in the C locale and UTC, to the second: as procps-ng writes it from /proc's
    start ticks and boot time, psutil's create_time to the second), and says so otherwise.
    A process mlcost saw start at `start_time`, psutil.Process.create_time()."""
    pid = int(pid)
    if not math.isfinite(start_time) or start_time < 0:  # (never from a sample): unchecked
        return f"kill -{signal} {pid}   # first check it is still the process: ps -fp {pid}"
    t = time.gmtime(math.floor(start_time))
    started = (f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:>2} "
               f"{t.tm_hour:02}:{t.tm_min:02}:{t.tm_sec:02} {t.tm_year}")
    return (f'if [ "$(LC_ALL=C TZ=UTC ps -o lstart= -p {pid})" = "{started}" ]; then '
            f'kill -{signal} {pid}; else echo "pid {pid} is not the process mlcost saw '
            f'(started {started} UTC): not signalled"; fi')


def parse_process_key(key: str) -> tuple[int, float]:
    """'1234:1700000000.12' -> (1234, 1700000000.12); ValueError says what is wrong."""
    pid, sep, start = key.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(pid), float(start)
    except ValueError:
        raise ValueError(f"process key {key!r} is not PID:START_TIME "
                         "(e.g. 1234:1700000000.12)") from None


def target_pid(target: str) -> int | None:
    """The PID an event's or a recommendation's target names: 'process:PID[:START]' or a
    process key 'PID:START'; None for 'gpu:N', 'host' or anything else."""
    rest = target.removeprefix("process:")
    if rest != target and rest.isdigit():
        return int(rest)
    try:
        return parse_process_key(rest)[0]
    except ValueError:
        return None


@dataclass(frozen=True)
class Health:
    ok: bool
    version: str
    uptime_s: float | None
    tick: int | None
    nvml_status: str
    store: dict[str, Any] = field(default_factory=dict)
    hostname: str = ""
    daemon_id: str = ""  # as Now.daemon_id

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Health:
        return cls(ok=bool(d.get("ok")), version=_s(d.get("version")),
                   uptime_s=_f(d.get("uptime_s")), tick=_i(d.get("tick")),
                   nvml_status=_s(d.get("nvml_status"), "unknown"),
                   store=_tree(_d(d.get("store"))), hostname=_line(d.get("hostname")),
                   daemon_id=_line(d.get("daemon_id"))[:64])


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    status: str
    error: str | None
    utilization: float | None
    sm_activity: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_watts: float | None
    temperature_c: int | None
    price_per_hour: float | None = None  # from the burn, once the daemon prices GPUs
    wasted_per_hour: float | None = None
    # The daemon's verdict under its [idle].utilization: busy, idle, or None when unknown
    # (no utilization reading, or an older daemon). Screens show this, not a threshold of their own.
    busy: bool | None = None
    # Driver-reserved memory beside used (NVML v2 memory info); None where only v1 exists.
    memory_reserved_bytes: int | None = None
    energy_per_hour: float | None = None  # the GPU's measured power priced, when $/kWh is set

    @property
    def id(self) -> str:
        return self.uuid or f"gpu{self.index}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], burn: Mapping[str, Any] | None = None) -> Gpu:
        burn = burn or {}
        return cls(index=_i(d.get("index")) or 0, uuid=_s(d.get("uuid")), name=_line(d.get("name")),
                   status=_s(d.get("status"), "ok"), error=_text(d.get("error")) or None,
                   utilization=_f(d.get("utilization")), sm_activity=_f(d.get("sm_activity")),
                   memory_used_bytes=_i(d.get("memory_used_bytes")),
                   memory_total_bytes=_i(d.get("memory_total_bytes")),
                   power_watts=_f(d.get("power_watts")),
                   temperature_c=_i(d.get("temperature_c")),
                   price_per_hour=_f(d.get("price_per_hour", burn.get("price_per_hour"))),
                   wasted_per_hour=_f(d.get("wasted_per_hour", burn.get("wasted_per_hour"))),
                   busy=_b(d.get("busy")),
                   memory_reserved_bytes=_i(d.get("memory_reserved_bytes")),
                   energy_per_hour=_f(d.get("energy_per_hour", burn.get("energy_per_hour"))))


@dataclass(frozen=True)
class GpuShare:
    """A process's use of one of its GPUs: its memory there and its SM share of that GPU (the
    process's own gpu_memory_bytes and sm_share are its sums over its GPUs)."""

    index: int
    memory_bytes: int | None
    sm_share: float | None


@dataclass(frozen=True)
class EnergyFigure:
    """Energy so far of a process, job, namespace or the host (daemon.analysis.energy): joules,
    kWh, grams CO2e (None: the grid intensity is unknown) and, for a process, its watts now."""

    joules: float | None
    kwh: float | None
    co2e_grams: float | None
    watts: float | None = None

    @classmethod
    def from_dict(cls, d: Any) -> EnergyFigure | None:
        if not isinstance(d, Mapping) or _f(d.get("joules")) is None:
            return None
        return cls(joules=_f(d.get("joules")), kwh=_f(d.get("kwh")),
                   co2e_grams=_f(d.get("co2e_grams")), watts=_f(d.get("watts")))


@dataclass(frozen=True)
class Energy:
    """The host's energy and carbon so far (/v1/now "energy"): the total, the host's idle line
    (GPUs no process holds), the grid intensity used and its source, and the largest jobs and
    namespaces (the rest under "other")."""

    total: EnergyFigure | None
    host_idle: EnergyFigure | None
    g_per_kwh: float | None
    grid_source: str
    grid_as_of: str | None
    by_job: tuple[tuple[str, EnergyFigure], ...] = ()
    by_namespace: tuple[tuple[str, EnergyFigure], ...] = ()

    @classmethod
    def from_dict(cls, d: Any) -> Energy | None:
        if not isinstance(d, Mapping):
            return None
        grid = _d(d.get("grid"))

        def groups(value: Any) -> tuple[tuple[str, EnergyFigure], ...]:
            found = [(_line(name)[:80], figure) for name, item in list(_d(value).items())[:64]
                     if (figure := EnergyFigure.from_dict(item)) is not None]
            return tuple(sorted(found, key=lambda pair: -(pair[1].joules or 0.0)))

        return cls(total=EnergyFigure.from_dict(d), host_idle=EnergyFigure.from_dict(
                       d.get("host_idle")),
                   g_per_kwh=_f(grid.get("g_per_kwh")), grid_source=_s(grid.get("source")),
                   grid_as_of=_text(grid.get("as_of")), by_job=groups(d.get("by_job")),
                   by_namespace=groups(d.get("by_namespace")))


@dataclass(frozen=True)
class Process:
    key: str  # 'pid:start_time'
    pid: int
    start_time: float
    ppid: int
    user: str
    command: str
    gpus: tuple[int, ...]
    gpu_memory_bytes: int | None
    sm_share: float | None
    cpu_percent: float | None
    rss_bytes: int | None
    io_wait_percent: float | None
    read_bytes_per_s: float | None
    state: str
    burn_per_hour: float | None = None
    cost: float | None = None
    phase: str | None = None
    phases: dict[str, Any] = field(default_factory=dict)  # phase -> {share, seconds, top_stacks}
    stack_status: str | None = None
    phase_reasons: dict[str, Any] = field(default_factory=dict)  # phase -> why (top stack)
    # How sure `phase` is: "high" (Python stacks) or "low" (/proc alone: ptrace denied or
    # stacks off); None where no phase is known or an older daemon does not say.
    phase_confidence: str | None = None
    # The phase it is in now (the phase column's): `compute` while it works on its GPU outside
    # a low-utilization window; while its GPU is quiet, what most of the window's recent stacks
    # say (never `idle` on a busy GPU of its own), or what its stacks said in earlier quiet
    # stretches (an older daemon does not say: `phase` stands).
    phase_now: str | None = None
    owner: dict[str, str] = field(default_factory=dict)  # pod, namespace, container, slurm_job, ... from cgroups
    workload: str | None = None  # short owner label for display: "ns/pod", "slurm 1234", "unit.service"
    # Its workload kind (daemon.analysis.kinds): training, batch_inference, online_inference,
    # notebook or other; how sure (0..1); why; and whether it serves (never offered SIGTERM).
    kind: str | None = None
    kind_confidence: float | None = None
    kind_evidence: tuple[str, ...] = ()
    serves: bool = False
    # Where its kind came from: "observed" (classified) or "config" ([kinds.jobs]); None where
    # no kind is known. And its inference audit (daemon.analysis.inference_audit: runtime,
    # quantization, batching, advice with savings), None for a process that is not inference.
    kind_source: str | None = None
    inference: dict[str, Any] | None = None
    per_gpu: tuple[GpuShare, ...] = ()  # by GPU index, from /v1/now's gpus list
    job: str | None = None  # its job label as the cost ledger has it ([cost].jobs, else script)
    energy: EnergyFigure | None = None  # its watts now, joules, kWh and grams CO2e so far

    @property
    def current_phase(self) -> tuple[str | None, str | None]:
        """The phase it is in now and how sure: `compute` from its GPU's own busy time (high)
        once it is back at work after stacks that said otherwise, else the phase its stacks
        (or /proc) say, with its balance's confidence (daemon.api.document.phase_now)."""
        if self.phase_now == self.phase or self.phase_now != COMPUTE:
            return self.phase_now, self.phase_confidence
        return self.phase_now, HIGH_CONFIDENCE

    def on_gpu(self, index: int) -> GpuShare | None:
        """Its memory and SM share on GPU `index` (None: not on it, or not said)."""
        return next((g for g in self.per_gpu if g.index == index), None)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], cost: Mapping[str, Any] | None = None) -> Process:
        cost = cost or {}
        pid = _i(d.get("pid")) or 0
        start = _f(d.get("start_time")) or 0.0

        def pick(name: str) -> Any:
            return d[name] if d.get(name) is not None else cost.get(name)

        gpus = tuple(sorted({_i(g.get("index")) if isinstance(g, Mapping) else _i(g)
                             for g in _l(d.get("gpus"))} - {None}))  # type: ignore[type-var]
        return cls(key=_s(d.get("key")) or process_key(pid, start), pid=pid, start_time=start,
                   ppid=_i(d.get("ppid")) or 0, user=_line(d.get("user")),
                   command=_line(d.get("command")), gpus=gpus,  # type: ignore[arg-type]
                   gpu_memory_bytes=_i(d.get("gpu_memory_bytes")),
                   sm_share=_f(d.get("sm_share")), cpu_percent=_f(d.get("cpu_percent")),
                   rss_bytes=_i(d.get("rss_bytes")), io_wait_percent=_f(d.get("io_wait_percent")),
                   read_bytes_per_s=_f(d.get("read_bytes_per_s")), state=_s(d.get("state"), "?"),
                   burn_per_hour=_f(pick("burn_per_hour")), cost=_f(pick("cost")),
                   phase=_text(pick("phase")),
                   phases=_tree(_d(pick("phases"))),
                   stack_status=_text(pick("stack_status")),
                   phase_reasons=_tree(_d(d.get("phase_reasons"))),
                   phase_confidence=_confidence(d.get("phase_confidence")),
                   phase_now=_text(d["phase_now"] if "phase_now" in d else pick("phase")),
                   owner={one_line(str(k)): one_line(v) for k, v in _d(d.get("owner")).items()
                          if isinstance(v, str)},
                   workload=_line(d.get("workload")) or None,
                   kind=_line(d.get("kind")) or None,
                   kind_confidence=_f(d.get("kind_confidence")),
                   kind_evidence=tuple(_line(e) for e in _l(d.get("kind_evidence"))[:16]
                                       if isinstance(e, str)),
                   serves=d.get("serves") is True,
                   kind_source=_line(d.get("kind_source"))[:16] or None,
                   inference=_tree(_d(d.get("inference"))) or None,
                   per_gpu=tuple(sorted(
                       (GpuShare(index, _i(g.get("memory_bytes")), _f(g.get("sm_share")))
                        for g in _l(d.get("gpus"))[:64] if isinstance(g, Mapping)
                        for index in (_i(g.get("index")),) if index is not None),
                       key=lambda share: share.index)),
                   job=_line(pick("job")) or None,
                   energy=EnergyFigure.from_dict(pick("energy")))


@dataclass(frozen=True)
class Recommendation:
    id: str
    rule: str
    target: str
    summary: str
    savings_per_month: float | None
    method: str
    evidence: dict[str, Any]
    action: dict[str, Any]
    snoozed_until: float | None = None
    # The advice in a few words, for a screen too narrow for the summary ("" from older
    # daemons and rules that set none).
    headline: str = ""
    # Its share of the host's savings after the ones before it in the stated order (never more
    # than the bill summed over the host); savings_per_month is its figure on its own.
    combined_savings_per_month: float | None = None
    savings_order: int | None = None
    # Observed evidence: seconds seen, seconds it needs before it is confident (None: needs
    # none). preliminary: not yet; confidence "low" (preliminary) or "high", None if no need.
    evidence_seconds: float | None = None
    evidence_needed_seconds: float | None = None
    preliminary: bool = False
    confidence: str | None = None
    # The config set thresholds it passed below their defaults (a simulated host):
    # name -> {"value": s, "default": s}.
    thresholds_shortened: bool = False
    shortened_thresholds: dict[str, Any] = field(default_factory=dict)
    # Hysteresis (daemon.analysis.book): "active" (found in the latest evaluation) or "holding"
    # (its condition false since condition_false_since; shown until resolves_at, then resolved).
    status: str = "active"
    condition_false_since: float | None = None
    resolves_at: float | None = None

    @property
    def action_kind(self) -> str:
        return _s(self.action.get("kind"), "none")

    @property
    def action_text(self) -> str:
        """What its action does, in the daemon's words (a SIGTERM's says what is lost), safe
        to print; "" where it has none."""
        return _s(self.action.get("text"))

    @property
    def shown_savings_per_month(self) -> float | None:
        """The figure a screen shows first: the combined one, else (older daemons) its own."""
        return (self.combined_savings_per_month if self.combined_savings_per_month is not None
                else self.savings_per_month)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Recommendation:
        confidence = d.get("confidence")
        return cls(id=_s(d.get("id")), rule=_s(d.get("rule")), target=_line(d.get("target")),
                   summary=_s(d.get("summary")), headline=_line(d.get("headline")),
                   savings_per_month=_f(d.get("savings_per_month")),
                   method=_s(d.get("method")), evidence=_tree(_d(d.get("evidence"))),
                   action=_tree(_d(d.get("action"))), snoozed_until=_f(d.get("snoozed_until")),
                   combined_savings_per_month=_f(d.get("combined_savings_per_month")),
                   savings_order=_i(d.get("savings_order")),
                   evidence_seconds=_f(d.get("evidence_seconds")),
                   evidence_needed_seconds=_f(d.get("evidence_needed_seconds")),
                   preliminary=bool(_b(d.get("preliminary"))),
                   confidence=_text(confidence),
                   thresholds_shortened=bool(_b(d.get("thresholds_shortened"))),
                   shortened_thresholds=_tree(_d(d.get("shortened_thresholds"))),
                   status=_s(d.get("status"), "active"),
                   condition_false_since=_f(d.get("condition_false_since")),
                   resolves_at=_f(d.get("resolves_at")))


@dataclass(frozen=True)
class Event:
    id: str
    kind: str
    target: str
    started_at: float | None
    ended_at: float | None
    cost_so_far: float | None
    detail: str
    snapshot: str = ""  # the incident snapshot taken for it (a path), "" when none

    @property
    def active(self) -> bool:
        return self.ended_at is None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        detail = d.get("detail")
        return cls(id=_s(d.get("id")), kind=_s(d.get("kind")),
                   target=one_line(str(d.get("target", ""))),
                   started_at=_f(d.get("started_at")), ended_at=_f(d.get("ended_at")),
                   cost_so_far=_f(d.get("cost_so_far")),
                   detail=_s(detail),
                   snapshot=_s(d.get("snapshot")))


@dataclass(frozen=True)
class Price:
    per_hour: float | None = None
    source: str = ""
    lifecycle: str = ""
    instance_type: str = ""
    warning: str = ""  # why the price may be wrong (stale, pre-cut, estimate) and the fix

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Price:
        return cls(per_hour=_f(d.get("per_hour")), source=_s(d.get("source")),
                   lifecycle=_s(d.get("lifecycle")), instance_type=_s(d.get("instance_type")),
                   warning=_s(d.get("warning")))


@dataclass(frozen=True)
class HostUsage:
    """The GPU host's CPU busy share (since the daemon's previous tick), memory and load, as
    the daemon read them there (daemon.sources.host)."""

    cpu_percent: float | None
    cpus: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    load: tuple[float, float, float] | None  # 1, 5 and 15 min averages

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostUsage:
        raw = _l(d.get("load"))
        load = [v for v in map(_f, raw) if v is not None]
        return cls(cpu_percent=_f(d.get("cpu_percent")), cpus=_i(d.get("cpus")),
                   memory_used_bytes=_i(d.get("memory_used_bytes")),
                   memory_total_bytes=_i(d.get("memory_total_bytes")),
                   load=(load[0], load[1], load[2]) if len(load) == len(raw) == 3 else None)


def cost_per_1k_text(cost_per_request: float | None) -> str:
    """A latency histogram's cost per request for a person: '$0.0123 per 1k requests' or '-'
    (the report, the profile, the HTML pages and mlcost-top write it so)."""
    if cost_per_request is None:
        return "-"
    return f"${cost_per_request * 1000:.4f} per 1k requests"


@dataclass(frozen=True)
class Latency:
    """One [[cost.latency]] histogram (/v1/now's cost.latency): p50/p99 of the requests between
    the daemon's last two readings (before two, of all the server counted), the requests, and
    the target's dollars per request over them."""

    target: str  # a job label or a process id 'pid:start_time'
    metric: str
    p50_seconds: float | None
    p99_seconds: float | None
    requests: float | None
    cost_per_request: float | None
    error: str | None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Latency:
        return cls(target=_line(d.get("target")), metric=_line(d.get("metric")),
                   p50_seconds=_f(d.get("p50_seconds")), p99_seconds=_f(d.get("p99_seconds")),
                   requests=_f(d.get("requests")), cost_per_request=_f(d.get("cost_per_request")),
                   error=_text(d.get("error")))


@dataclass(frozen=True)
class Budget:
    """One [cost.budgets] budget in its current UTC period (/v1/now's `budgets`)."""

    target: str  # "host", "user:NAME" or "job:NAME"
    period: str  # "daily" or "monthly"
    limit: float
    spent: float
    crossed: bool

    @property
    def share(self) -> float:
        """The part of the limit spent (1.0 at the limit)."""
        return self.spent / self.limit if self.limit > 0 else 0.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Budget | None:
        limit, spent = _f(d.get("limit")), _f(d.get("spent"))
        if limit is None or spent is None:
            return None
        return cls(target=_line(d.get("target")), period=_line(d.get("period")), limit=limit,
                   spent=spent, crossed=d.get("crossed") is True)


@dataclass(frozen=True)
class Now:
    """One /v1/now document: the host's latest state."""

    ts: float | None
    tick: int
    hostname: str
    instance: dict[str, Any]
    simulated: str | None
    nvml_status: str
    gpus: tuple[Gpu, ...]
    processes: tuple[Process, ...]
    price: Price | None = None
    burn_per_hour: float | None = None
    wasted_per_hour: float | None = None
    idle_per_hour: float | None = None
    spend_today: float | None = None
    # where spend_today counts from after the day's start (a replay of a store that holds the
    # day from then on only); None: the whole day
    spend_today_since: float | None = None
    events: tuple[Event, ...] = ()
    recommendations: tuple[Recommendation, ...] = ()
    store: dict[str, Any] = field(default_factory=dict)
    # The one "potential savings" figure: the recommendations' combined savings (never more than
    # bill_per_month); None from a daemon that does not combine them.
    potential_savings_per_month: float | None = None
    bill_per_month: float | None = None
    savings_order: str = ""
    energy_per_hour: float | None = None  # the GPUs' measured power priced ([instance] $/kWh)
    # The host line; None from an older daemon and in a replay of a store (not recorded).
    host_usage: HostUsage | None = None
    latency: tuple[Latency, ...] = ()  # [[cost.latency]]: p50/p99 beside the cost
    energy: Energy | None = None  # energy and carbon so far (daemon.analysis.energy)
    evaluate_every_s: float | None = None  # how often the rules run; None from older daemons
    budgets: tuple[Budget, ...] = ()  # [cost.budgets] in their current period
    # GPUs the price counts that NVML does not list (charged in the burn: idle, wasted whole),
    # their $/h, and the burn's warning saying so; 0, None and "" from older daemons
    unseen_gpus: int = 0
    unseen_per_hour: float | None = None
    burn_warning: str = ""
    # chosen at the daemon's start: one daemon reached at two targets gives one; "" from older
    # daemons and in a replay
    daemon_id: str = ""

    def host_budget(self, period: str) -> Budget | None:
        """The host's "daily" or "monthly" budget, where one is set (the daily one is what
        `spend_today` is measured against)."""
        return next((b for b in self.budgets if b.target == "host" and b.period == period),
                    None)

    def latency_of(self, process: Process) -> tuple[Latency, ...]:
        """The latency histograms configured for this process or for its job."""
        return tuple(h for h in self.latency if h.target in (process.key, process.job))

    @property
    def idle_alerts(self) -> tuple[Event, ...]:
        return tuple(e for e in self.events if e.active)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Now:
        host = _d(d.get("host"))
        burn = _d(d.get("burn"))
        burn_gpus = {g.get("index"): g for g in _l(burn.get("gpus")) if isinstance(g, Mapping)}
        costs = _d(d.get("costs")) or _d(burn.get("processes"))
        price_doc = _d(d.get("price")) or _d(burn.get("price"))
        price = Price.from_dict(price_doc) if price_doc else None
        if price is not None and not price.source:
            price = Price(price.per_hour, _s(burn.get("price_source")), price.lifecycle,
                          price.instance_type, price.warning)
        cost = _d(d.get("cost"))
        savings = _d(d.get("savings"))
        spend_today = _f(d.get("spend_today"))
        if spend_today is None and cost.get("by_day") and d.get("ts") is not None:
            spend_today = _f(_d(cost.get("by_day")).get(utc_day(float(d["ts"]))))
        return cls(
            ts=_f(d.get("ts")), tick=_i(d.get("tick")) or 0,
            hostname=_line(host.get("hostname")), instance=_tree(_d(host.get("instance"))),
            simulated=_text(host.get("simulated")),
            nvml_status=_s(host.get("nvml_status"), "unknown"),
            evaluate_every_s=_f(host.get("evaluate_every_s")),
            budgets=tuple(b for b in (Budget.from_dict(x) for x in _l(d.get("budgets"))
                                      if isinstance(x, Mapping)) if b is not None),
            gpus=tuple(Gpu.from_dict(g, burn_gpus.get(g.get("index")))
                       for g in _l(d.get("gpus")) if isinstance(g, Mapping)),
            processes=tuple(Process.from_dict(p, _d(costs.get(_s(p.get("key")))))
                            for p in _l(d.get("processes")) if isinstance(p, Mapping)),
            price=price,
            burn_per_hour=_f(burn.get("total_per_hour")),
            wasted_per_hour=_f(burn.get("wasted_per_hour")),
            idle_per_hour=_f(burn.get("idle_per_hour")),
            spend_today=spend_today, spend_today_since=_f(d.get("spend_today_since")),
            events=tuple(Event.from_dict(e) for e in _l(d.get("events"))
                         if isinstance(e, Mapping)),
            recommendations=tuple(Recommendation.from_dict(r)
                                  for r in _l(d.get("recommendations"))
                                  if isinstance(r, Mapping)),
            store=_tree(_d(d.get("store"))),
            daemon_id=_line(d.get("daemon_id"))[:64],
            potential_savings_per_month=_f(savings.get("potential_per_month")),
            bill_per_month=_f(savings.get("bill_per_month")),
            savings_order=_s(savings.get("order")),
            energy_per_hour=_f(burn.get("energy_per_hour")),
            host_usage=HostUsage.from_dict(d["host_usage"])
            if isinstance(d.get("host_usage"), Mapping) else None,
            latency=tuple(Latency.from_dict(h) for h in _l(cost.get("latency"))[:64]
                          if isinstance(h, Mapping)),
            energy=Energy.from_dict(d.get("energy")),
            unseen_gpus=_i(burn.get("unseen_gpus")) or 0,
            unseen_per_hour=_f(burn.get("unseen_per_hour")),
            burn_warning=_line(burn.get("warning")),
        )


@dataclass(frozen=True)
class Point:
    ts: float
    avg: float
    min: float
    max: float


@dataclass(frozen=True)
class History:
    metric: str
    target: str  # "gpu:0" or "process:PID:START"
    since_s: float
    points: tuple[Point, ...]

    @property
    def values(self) -> list[float]:
        return [p.avg for p in self.points]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> History:
        points = []
        for p in _l(d.get("points")):
            if isinstance(p, list | tuple) and len(p) == 4:
                points.append(Point(*(float(x) for x in p)))
            elif isinstance(p, Mapping):
                points.append(Point(float(p["ts"]), float(p["avg"]), float(p["min"]),
                                    float(p["max"])))
        return cls(metric=_s(d.get("metric")), target=_line(d.get("target")),
                   since_s=_f(d.get("since_s")) or 0.0, points=tuple(points))


@dataclass(frozen=True)
class Phases:
    key: str
    since_s: float
    phases: dict[str, Any]
    stack_status: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Phases:
        return cls(key=_s(d.get("key")), since_s=_f(d.get("since_s")) or 0.0,
                   phases=_tree(_d(d.get("phases"))),
                   stack_status=_text(d.get("stack_status")))


@dataclass(frozen=True)
class ComparedFigure:
    """One figure of a comparison (GET /v1/compare), as compare's text shows it."""

    label: str
    before: str
    after: str
    change: str
    verdict: str
    counted: bool = True  # False: judged but left out of the overall verdict (energy per hour)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ComparedFigure:
        return cls(label=_line(d.get("label"))[:40], before=_line(d.get("a_text"), "-")[:20],
                   after=_line(d.get("b_text"), "-")[:20],
                   change=_line(d.get("change_text"), "-")[:20],
                   verdict=_line(d.get("verdict"), "?")[:20],
                   counted=d.get("in_overall") is not False)


@dataclass(frozen=True)
class Comparison:
    """A job's latest run against its previous one (GET /v1/compare?previous=...): both
    runs' labels, each figure with its verdict, the overall verdict, and the recommendations
    that are new, gone or changed ('status rule')."""

    before: str
    after: str
    verdict: str
    figures: tuple[ComparedFigure, ...]
    recommendations: tuple[str, ...]
    price_note: str | None = None  # the two runs were charged different prices per GPU-hour

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Comparison:
        figures = tuple(ComparedFigure.from_dict(f) for f in _l(d.get("figures"))[:40]
                        if isinstance(f, Mapping))
        changed = tuple(f"{_line(r.get('status'))} {_line(r.get('rule'))}"[:60]
                        for r in _l(d.get("recommendations"))[:20]
                        if isinstance(r, Mapping) and r.get("status") != "same")
        return cls(before=_line(_d(d.get("a")).get("label"))[:120],
                   after=_line(_d(d.get("b")).get("label"))[:120],
                   verdict=_line(d.get("verdict"), "?")[:20], figures=figures,
                   recommendations=changed,
                   price_note=_line(d.get("price_note"))[:400] or None)


@dataclass(frozen=True)
class ActionResult:
    """What applying (or dry-running) a recommendation did or would do."""

    id: str
    kind: str
    dry_run: bool
    done: bool
    message: str
    commands: tuple[str, ...] = ()
    patch: str | None = None
    steps: tuple[str, ...] = ()
    # A dry run's: why the real run will be refused (403: the daemon does not take actions,
    # [api].allow_actions), None when it will be tried.
    refused: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ActionResult:
        return cls(id=_s(d.get("id")), kind=_s(d.get("kind")), dry_run=bool(d.get("dry_run")),
                   done=bool(d.get("done")), message=_s(d.get("message")),
                   commands=tuple(lines(str(c)) for c in _l(d.get("commands"))),
                   patch=_text(d.get("patch")),
                   steps=tuple(lines(str(s)) for s in _l(d.get("steps"))),
                   refused=_text(d.get("refused")) or None)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "dry_run": self.dry_run, "done": self.done,
                "message": self.message, "commands": list(self.commands), "patch": self.patch,
                "steps": list(self.steps), "refused": self.refused}
