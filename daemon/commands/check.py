"""`mlcostd check`: what works on this host and what doesn't, each with the fix."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from daemon import clock
from daemon.sources import safe_text
from daemon.store.files import RefusedFile, check_existing

OK, WARN, FAIL = "ok", "warn", "fail"
CAP_SYS_PTRACE = 19
# PRAGMA quick_check reads every page of the store: minutes for a store of many GB at most.
QUICK_CHECK_LIMIT_S = 600.0
SLOW_QUICK_CHECK_S = 2.0  # a check that took longer says how long


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def check_nvml() -> Check:
    """NVML starts and lists the GPUs; per-process SM share works on each (it needs no MIG)."""
    import pynvml

    from daemon.sources.nvml_query import (
        UNSUPPORTED,
        NvmlFailure,
        has_symbol,
        nvml_query,
        start_nvml,
        stop_nvml,
        text,
    )
    from daemon.sources.redact import redact_field

    started = start_nvml()
    if isinstance(started, NvmlFailure):
        return Check("NVML", FAIL, started.message,
                     "fix the driver as said; until then mlcostd records processes and "
                     "pressure but no GPUs (`mlcostd run --simulate demo` shows a whole host)")
    try:
        count, driver = started
        names = []
        notes = []
        for index in range(count):
            handle = nvml_query(pynvml.nvmlDeviceGetHandleByIndex, index)
            if isinstance(handle, NvmlFailure):
                names.append("?")
                notes.append(f"GPU {index}: {handle.describe()}")
                continue
            name = nvml_query(pynvml.nvmlDeviceGetName, handle)
            names.append("?" if isinstance(name, NvmlFailure)
                         else redact_field(safe_text.one_line(text(name))))
            shares = nvml_query(pynvml.nvmlDeviceGetProcessUtilization, handle, 0)
            if isinstance(shares, NvmlFailure) and shares.kind == UNSUPPORTED:
                notes.append(f"GPU {index}: per-process SM share not supported (MIG?)")
        detail = f"driver {driver}, {count} GPU{'' if count == 1 else 's'}: " + ", ".join(
            f"{i}: {n}" for i, n in enumerate(names))
        if has_symbol("nvmlDeviceGetMemoryInfo_v2"):
            detail += "; memory used as nvidia-smi shows it (v2 memory info, reserved apart)"
        else:
            notes.append("v1 memory info only: memory used includes the driver-reserved memory "
                         "(a driver of R510 or newer reports it as nvidia-smi does)")
        if notes:
            return Check("NVML", WARN, detail + "; " + "; ".join(notes),
                         "processes on these GPUs are charged by memory share; a GPU that "
                         "fails is shown with its NVML error")
        return Check("NVML", OK, detail)
    finally:
        stop_nvml()


def _capabilities() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def check_py_spy() -> Check:
    from daemon.sources.stacks import find_py_spy

    path = find_py_spy()
    if path is None:
        return Check("py-spy", FAIL, "py-spy is not installed",
                     "pip install py-spy (it comes with mlcost; is the venv's bin on PATH?)")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("py-spy", FAIL, f"{path} does not run: {exc}", "reinstall py-spy")
    can_trace = os.geteuid() == 0 or bool(_capabilities() & (1 << CAP_SYS_PTRACE))
    scope_file = Path("/proc/sys/kernel/yama/ptrace_scope")
    scope = scope_file.read_text().strip() if scope_file.exists() else None
    if can_trace:
        return Check("py-spy", OK, f"{version} at {path}; may read every process's stack")
    how = "run mlcostd as root, or give it CAP_SYS_PTRACE"
    if scope in ("2", "3"):
        return Check("py-spy", FAIL, f"{version}; yama ptrace_scope={scope} forbids it",
                     how + " (scope 3 forbids tracing entirely)")
    detail = f"{version}; not root and no CAP_SYS_PTRACE"
    if scope == "1":
        detail += ", yama ptrace_scope=1: only processes that allow it (PR_SET_PTRACER)"
    else:
        detail += ": only this user's processes"
    return Check("py-spy", WARN, detail, how)


PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
TRACING_LISTED = 8  # untraceable processes named in the detail; the rest are counted
COMMAND_CHARS = 160  # of each one's command line (redacted)


def gpu_process_pids() -> list[int]:
    """The pids NVML lists on any GPU (compute processes), [] where NVML does not start."""
    import pynvml

    from daemon.sources.nvml_query import NvmlFailure, nvml_query, start_nvml, stop_nvml

    started = start_nvml()
    if isinstance(started, NvmlFailure):
        return []
    pids: set[int] = set()
    try:
        for index in range(started[0]):
            handle = nvml_query(pynvml.nvmlDeviceGetHandleByIndex, index)
            if isinstance(handle, NvmlFailure):
                continue
            running = nvml_query(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
            if not isinstance(running, NvmlFailure):
                pids.update(int(p.pid) for p in running)
    finally:
        stop_nvml()
    return sorted(pids)


def how_to_grant_ptrace(scope: str | None) -> str:
    """What lets mlcostd read other processes' stacks, for this host's yama setting."""
    ways = ["in Kubernetes, add SYS_PTRACE to the DaemonSet's container securityContext."
            "capabilities.add (deploy/kubernetes/ has it)",
            "elsewhere run mlcostd as root, or give it CAP_SYS_PTRACE "
            "(systemd: AmbientCapabilities=CAP_SYS_PTRACE)"]
    if scope in ("1", "2"):
        ways.append(f"kernel.yama.ptrace_scope={scope} also forbids it without the capability: "
                    "`sysctl -w kernel.yama.ptrace_scope=1` keeps yama and lets CAP_SYS_PTRACE "
                    "trace (0 lets any same-user tracer)")
    elif scope == "3":
        ways.append("kernel.yama.ptrace_scope=3 forbids all tracing until a reboot; set "
                    "kernel.yama.ptrace_scope=1 in /etc/sysctl.d/ and reboot")
    return "; ".join(ways) + ". Until then phases come from /proc (marked ~, low confidence)"


def check_tracing(pids: list[int], *, proc_root: str = "/proc",
                  scope_path: str = PTRACE_SCOPE) -> Check:
    """Which GPU processes py-spy may read (ptrace), and how to grant it for the rest.

    The probe is /proc/PID/syscall, which the kernel guards with the same ptrace check
    (PTRACE_MODE_ATTACH, yama included) that py-spy meets, so nothing is attached to."""
    from daemon.sources.proc_state import may_trace

    try:
        scope: str | None = Path(scope_path).read_text().strip()[:4]
    except OSError:
        scope = None  # no yama on this kernel
    yama = f"yama ptrace_scope={scope}" if scope is not None else "no yama ptrace_scope"
    name = "tracing (py-spy)"
    if not pids:
        return Check(name, OK, f"no GPU process to trace now ({yama})")
    traced = {pid: may_trace(pid, proc_root) for pid in pids}
    denied = sorted(pid for pid, ok in traced.items() if ok is False)
    readable = sum(1 for ok in traced.values() if ok)
    if not denied:
        return Check(name, OK, f"all {readable} GPU process(es) can be traced ({yama})")
    listed = ", ".join(f"pid {pid} ({_command_of(pid, proc_root)})"
                       for pid in denied[:TRACING_LISTED])
    more = f" and {len(denied) - TRACING_LISTED} more" if len(denied) > TRACING_LISTED else ""
    return Check(name, WARN,
                 f"{readable} GPU process(es) can be traced, {len(denied)} cannot ({yama}): "
                 f"{listed}{more}; their phases come from /proc, no stacks (low confidence)",
                 how_to_grant_ptrace(scope))


def _command_of(pid: int, proc_root: str) -> str:
    from daemon.sources.redact import redact_argv

    try:
        raw = Path(f"{proc_root}/{pid}/cmdline").read_bytes()[:4096]
    except OSError:
        return "?"
    args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    return safe_text.one_line(redact_argv(args))[:COMMAND_CHARS] or "?"


def check_delay_accounting() -> Check:
    from daemon.sources.procs import delay_accounting_enabled

    enabled = delay_accounting_enabled()
    if enabled:
        return Check("delay accounting", OK, "kernel.task_delayacct=1: I/O wait per process is "
                                              "measured")
    if enabled is None:
        return Check("delay accounting", WARN, "kernel has no /proc/sys/kernel/task_delayacct",
                     "boot with the `delayacct` kernel parameter to measure I/O wait per process")
    return Check("delay accounting", WARN,
                 "kernel.task_delayacct=0: I/O wait per process reads as unknown",
                 "sysctl -w kernel.task_delayacct=1 (as root; counts processes started after)")


def check_psi() -> Check:
    path = Path("/proc/pressure/io")
    try:
        path.read_text()
    except OSError:
        return Check("pressure (PSI)", WARN, "/proc/pressure/io is not readable",
                     "needs Linux >= 4.20 with CONFIG_PSI; boot with psi=1 if it is off")
    return Check("pressure (PSI)", OK, "/proc/pressure/io and /proc/pressure/cpu readable")


def check_process_io() -> Check:
    if os.geteuid() == 0:
        return Check("process I/O", OK, "root: /proc/PID/io readable for every user")
    return Check("process I/O", WARN, "not root: read/write bytes of other users' processes "
                                      "are unknown", "run mlcostd as root")


def check_database(db: Path) -> Check:
    try:  # what `mlcostd run` refuses at the path (a link, a FIFO, a device, a folder)
        check_existing(db)
    except RefusedFile as exc:
        return Check("database", FAIL, str(exc), "pass --db with a path to a regular file, or "
                     "set [daemon].db")
    folder = db.parent
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return Check("database", FAIL, f"cannot write {db} ({probe} is not writable)",
                     "pass --db with a writable path, set [daemon].db, or run as root")
    if not db.is_file():
        return Check("database", OK, f"{db} is writable")
    return _quick_check(db)


def _quick_check(db: Path) -> Check:
    """SQLite's PRAGMA quick_check of an existing store: a damaged one fails, with what to do
    (the daemon would move it aside at its start and begin a new one)."""
    import sqlite3

    from daemon.store.errors import damaged_store_advice, is_corruption, store_damage
    from daemon.store.reader import ReaderTimeout, StoreReader

    started = time.monotonic()
    try:
        reader = StoreReader(str(db), timeout_s=QUICK_CHECK_LIMIT_S, tidy=True)
        try:
            rows = reader.query("PRAGMA quick_check(1)")
        finally:
            reader.close()
        answer = str(next(iter(rows[0].values()))) if rows else "no answer"
    except sqlite3.DatabaseError as exc:
        short = _cut_short(db)  # (SQLite reads a file truncated under it as an I/O error)
        if short is not None:
            return Check("database", FAIL, f"{db} cannot be read: the file was cut short "
                         f"({short})", damaged_store_advice(db))
        if not is_corruption(exc):
            return Check("database", WARN, f"{db} is writable; PRAGMA quick_check could not "
                         f"run: {exc}", "run `mlcostd check` again when the store is not busy")
        answer = str(exc)
    except ReaderTimeout:
        return Check("database", WARN, f"{db} is writable; PRAGMA quick_check did not finish "
                     f"in {QUICK_CHECK_LIMIT_S:.0f} s",
                     f"run `sqlite3 {shlex.quote(str(db))} 'PRAGMA quick_check'` to check it "
                     "without a limit")
    took = time.monotonic() - started
    if answer != "ok":
        return Check("database", FAIL, store_damage(db, answer), damaged_store_advice(db))
    slow = f" in {took:.1f} s" if took >= SLOW_QUICK_CHECK_S else ""
    return Check("database", OK, f"{db} is writable; PRAGMA quick_check: ok{slow}")


def _cut_short(db: Path) -> str | None:
    """What says the store's file is shorter than its header counts (daemon.store.
    database_file.cut_short); None when it is not, or it cannot be opened."""
    from daemon.store.database_file import cut_short

    try:
        fd = os.open(db, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return cut_short(fd)
    finally:
        os.close(fd)


def check_recorded_stacks(db: Path) -> Check | None:
    """What the recorder's stack sampling met, per process, from the store (if there is one)."""
    if not db.is_file():  # nothing there yet, or what check_database refuses
        return None
    from daemon.store.queries import stack_statuses
    from daemon.store.reader import StoreReader, stored_command

    try:
        reader = StoreReader(str(db), timeout_s=2.0, tidy=True)
        try:
            statuses = stack_statuses(reader)
            commands = {(r["pid"], r["start_ms"] / 1000): r["command"] for r in reader.query(
                "SELECT pid, start_ms, command FROM processes")}
        finally:
            reader.close()
    except Exception as exc:  # an old or busy store: say so, don't fail the check
        return Check("stack sampling", WARN, f"cannot read {db}: {exc}")
    if not statuses:
        return Check("stack sampling", OK, "no process has needed its stack sampled yet")
    bad = {key: s for key, s in statuses.items() if s["status"] != "ok"}
    ok = len(statuses) - len(bad)
    if not bad:
        return Check("stack sampling", OK, f"stacks read from all {ok} processes sampled")
    lines = [f"pid {pid} ({stored_command(commands.get((pid, start)) or '?')[:50]}): "
             f"{s['status']}"
             f"{': ' + s['error'] if s['error'] else ''}"
             for (pid, start), s in sorted(bad.items())[:5]]
    fix = ("run mlcostd as root or with CAP_SYS_PTRACE" if any(
        s["status"] == "permission_denied" for s in bad.values()) else
        "see each status; processes that are not Python have no Python stack")
    return Check("stack sampling", WARN, f"{ok} ok, {len(bad)} not: " + "; ".join(lines), fix)


def gpus_seen() -> int | None:
    """How many GPUs NVML counts on this host (a price per GPU-hour is charged for each), or
    None where NVML does not start."""
    from daemon.sources.nvml_query import NvmlFailure, start_nvml, stop_nvml

    started = start_nvml()
    if isinstance(started, NvmlFailure):
        return None
    stop_nvml()
    return started[0] or None


Priced = tuple[Any, Any, dict[str, Any]]  # price_host's answer


def _price(config: Any, simulated_instance: dict[str, Any] | None) -> Priced | Exception:
    """The host priced as the daemon would price it (with the GPUs NVML counts), or why it
    cannot be; its staleness is a check of its own, not a logged warning too."""
    from daemon.runtime.price_host import price_host

    try:
        return price_host(config, simulated_instance, gpus_seen(), log_warning=False)
    except (OSError, ValueError) as exc:
        return exc


def check_price(config: Any, simulated_instance: dict[str, Any] | None = None,
                priced: Priced | Exception | None = None) -> Check:
    """The price the daemon would charge this host at, from where, and whether it can be
    trusted today (pricing.staleness); a stale one warns with the refresh command."""
    from daemon.runtime.price_host import is_managed_instance, price_warning

    found = _price(config, simulated_instance) if priced is None else priced
    if isinstance(found, Exception):
        return Check("price", FAIL, f"cannot price this host: {found}",
                     "fix [instance] / [pricing] in the config as said")
    price, catalog, instance = found
    where = " ".join(str(v) for v in (instance.get("provider"), instance.get("type"),
                                       instance.get("region")) if v) or "this host"
    if price.per_hour <= 0:
        fix = ("set [instance].provider and type, or [instance].price_per_hour, or "
               "off-cloud [instance].price_per_gpu_hour / purchase_price")
        if is_managed_instance(price.instance_type):
            fix = (f"mlcostd prices --refresh sagemaker --region {price.region or 'us-east-1'} "
                   f"--instance {price.instance_type} (AWS credentials), then restart mlcostd")
        return Check("price", WARN, f"no price for {where} ({price.source}; instance from "
                                    f"{instance.get('source')})", fix)
    detail = f"${price.per_hour:.4f}/h for {where} ({price.source})"
    warning = price_warning(price, catalog)
    if warning is not None:
        why = warning.message.removesuffix(f"; run `{warning.refresh_command}`")
        return Check("price", WARN, f"{detail}; {why}",
                     f"{warning.refresh_command} (then restart mlcostd)")
    return Check("price", OK, detail)


def check_refreshes(cache_path: Path) -> list[Check]:
    """One warning per price source whose last `mlcostd prices --refresh` failed (the previous
    prices were kept; the errors say why)."""
    from daemon.sources.redact import redact_field
    from pricing.cache import read_refresh_log
    from pricing.offer import format_age

    checks = []
    for source, record in sorted(read_refresh_log(cache_path).items()):
        if record.ok:
            continue
        # (the cache's text: an error names the URL it fetched, which may hold a token)
        errors = redact_field("; ".join(record.errors)) or "no error recorded"
        checks.append(Check(
            f"price refresh ({source})", WARN,
            f"last {source} refresh failed: {errors} ({format_age(clock.now() - record.at)} "
            f"ago, {record.fetched} price(s) fetched; the previous prices were kept)",
            f"fix what the error says, then `mlcostd prices --refresh {source}` "
            f"(cache {cache_path})"))
    return checks


def price_checks(config: Any, simulated_instance: dict[str, Any] | None = None) -> list[Check]:
    """The host's price and the failed refreshes in the price cache the daemon reads."""
    from daemon.config import price_cache_path

    priced = _price(config, simulated_instance)  # once: its warning is said once
    return [check_price(config, simulated_instance, priced),
            check_carbon(config, simulated_instance, priced),
            *check_refreshes(price_cache_path(config))]


def check_carbon(config: Any, simulated_instance: dict[str, Any] | None = None,
                 priced: Priced | Exception | None = None) -> Check:
    """The grid intensity carbon is figured at ([energy], else the region's annual average
    from the bundled table), or why carbon is unknown and how to set it."""
    from pricing.grid import UNKNOWN_FIX, grid_intensity

    found = _price(config, simulated_instance) if priced is None else priced
    provider = None if isinstance(found, Exception) else found[0].provider
    region = None if isinstance(found, Exception) else found[0].region
    grid = grid_intensity(provider, region,
                          override_g_per_kwh=config.energy.grid_intensity_g_per_kwh,
                          override_region=config.energy.region)
    if grid.g_per_kwh is None:
        return Check("carbon", WARN, grid.source.split("; " + UNKNOWN_FIX)[0], UNKNOWN_FIX)
    return Check("carbon", OK, f"{grid.g_per_kwh:g} g CO2e/kWh ({grid.source})")


def owner_checks(config: Any) -> list[Check]:
    """Who owns a process: the kubelet pod-resources API where there is a kubelet, the Slurm
    prolog's job folder where one is configured (README "Who owns a process")."""
    from daemon.sources.owners import OwnerReader
    from daemon.sources.podresources import PodResources

    checks = []
    socket = config.owners.pod_resources_socket
    in_pod = "pod_uid" in OwnerReader().owner_of(os.getpid())
    pods = PodResources(socket, refresh_s=0)
    if socket and pods.available():
        devices = pods.devices()
        if pods.status == "ok":
            checks.append(Check("pod names", OK, f"kubelet pod-resources at {socket}: "
                                f"{len(devices)} device(s) allocated to pods"))
        else:
            checks.append(Check("pod names", WARN, f"{socket}: {pods.status}",
                                "pip install 'mlcost[kubernetes]' (grpcio), and mount the "
                                "directory /var/lib/kubelet/pod-resources into the pod"))
    elif in_pod:
        checks.append(Check("pod names", WARN, f"mlcostd runs in a pod but {socket or 'no socket'}"
                            " is not there: pods are known by their UID only",
                            "mount the host's /var/lib/kubelet/pod-resources directory "
                            "(hostPath) at that path, or set [owners].pod_resources_socket"))
    folder = config.owners.slurm_job_info_dir
    if folder and not os.path.isdir(folder):
        checks.append(Check("Slurm job info", WARN, f"[owners].slurm_job_info_dir = {folder!r}"
                            " is not a folder: Slurm jobs show no account or partition",
                            "create it in the Slurm prolog (README \"Who owns a process\") "
                            "or clear the setting"))
    elif folder:
        checks.append(Check("Slurm job info", OK, f"account and partition from {folder}"))
    return checks


def check_gpu_activity(config: Any, proc_root: str = "/proc", *,
                       nvml_started: bool = True) -> Check:
    """Where SM, tensor and DRAM activity come from: DCGM (dcgm-exporter configured, or
    nv-hostengine running: GPM left off, the two would skew each other) or NVML's GPM
    (daemon.sources.dcgm), which needs NVML started (`nvml_started`: check_nvml did not
    fail)."""
    from daemon.sources.dcgm import ProfilingCounters

    name = "SM activity source"
    url = config.nvml.dcgm_exporter_url
    counters = ProfilingCounters(url, proc_root=proc_root)
    if url:
        counters.poll_once()
        found = counters.latest()
        if found:
            return Check(name, OK, f"DCGM, through dcgm-exporter at {url}: SM, tensor and DRAM "
                         f"activity for {len(found)} GPU(s); GPM left off")
        return Check(name, WARN, f"DCGM, through dcgm-exporter at {url} (GPM left off), but "
                     f"{counters.status}: SM activity is absent",
                     "start dcgm-exporter there, or fix [nvml].dcgm_exporter_url; it must "
                     "export DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and "
                     "DCGM_FI_PROF_DRAM_ACTIVE (its counters CSV)")
    if counters.hostengine():
        return Check(name, WARN, "nv-hostengine (DCGM) runs on this host: GPM left off so "
                     "neither skews the other; SM activity is absent",
                     "set [nvml].dcgm_exporter_url = \"http://localhost:9400/metrics\" (where "
                     "dcgm-exporter serves) to read DCGM's profiling fields")
    if not nvml_started:  # (said after "[FAIL] NVML", an "[ok] NVML's GPM" contradicted it)
        return Check(name, WARN, "none: NVML did not start (see NVML above), so no GPU's SM "
                     "activity is read", "fix NVML first; GPM is read through it")
    return Check(name, OK, "NVML's GPM on GPUs that have it (Hopper and later); no DCGM on "
                 "this host (a GPU whose counters another reader holds is left alone)")


def run_checks(db: Path, extra: list[Check] | None = None,
               config: Any | None = None) -> list[Check]:
    """Every check, `extra` after the host's, and with `config` where SM activity comes from
    (last: it reads whether NVML started)."""
    from daemon.store.errors import damaged_store_advice

    nvml = check_nvml()
    checks = [nvml, check_py_spy(), check_tracing(gpu_process_pids()),
              check_delay_accounting(), check_psi(), check_process_io(), check_database(db)]
    database = checks[-1]
    # A damaged store fails `database`, with how to salvage it; reading its stacks would fail
    # too, and SQLite's error on a second line would report one damaged file twice.
    damaged = database.status == FAIL and database.fix == damaged_store_advice(db)
    recorded = None if damaged else check_recorded_stacks(db)
    if recorded is not None:
        checks.append(recorded)
    checks += extra or []
    if config is not None:
        checks.append(check_gpu_activity(config, nvml_started=nvml.status != FAIL))
    return checks


def render(checks: list[Check]) -> str:
    """The checks as text for a terminal: a detail quotes paths, py-spy's errors and the
    store's recorded stacks, so control bytes are shown as `\\x1b` (safe_text), never sent."""
    marks = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}
    lines = []
    for check in checks:
        lines.append(f"[{marks[check.status]}] {check.name}: {check.detail}")
        if check.fix and check.status != OK:
            lines.append(f"       fix: {check.fix}")
    return safe_text.lines("\n".join(lines) + "\n")


def as_json(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(check) for check in checks]
