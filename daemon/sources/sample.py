"""Raw samples: what the sources saw at one tick, frozen.

These are facts as read (cumulative counters stay cumulative). Rates and shares over time are
derived from two samples by the reader; the store keeps the raw facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# GPU status values. "ok" means every field that the GPU supports was read this tick.
GPU_OK = "ok"
NVML_OK = "ok"  # Sample.nvml_status when NVML started (else why it gave nothing)
GPU_LOST = "lost"  # NVML_ERROR_GPU_IS_LOST / RESET_REQUIRED: the device fell off the bus
GPU_TIMEOUT = "timeout"  # an NVML call overran its deadline; the reading is older than a tick
GPU_ERROR = "error"  # any other NVML error for this device


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one tick. A field is None when the GPU does not support it or it failed."""

    index: int
    uuid: str
    name: str
    status: str = GPU_OK
    utilization: float | None = None  # percent of time any kernel ran (NVML "GPU utilization")
    sm_activity: float | None = None  # percent SM activity (GPM, Hopper and later)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    temperature_c: int | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    error: str | None = None  # what went wrong, for status != ok
    # Memory the driver and firmware reserve (NVML v2 memory info); memory_used_bytes excludes
    # it, as nvidia-smi and nvitop show. None where the driver has only v1 memory info (then
    # memory_used_bytes includes it) or the read failed.
    memory_reserved_bytes: int | None = None


# A GPU's fields, declared once (GpuSample's, in its order): what the tick's derived model
# carries (daemon.analysis.derive.GpuModel) and /v1/now shows of each GPU (daemon.api.document).
GPU_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GpuSample))


@dataclass(frozen=True, slots=True)
class GpuUse:
    """What one process holds on one GPU."""

    gpu_index: int
    memory_bytes: int | None  # None: NVML_VALUE_NOT_AVAILABLE
    sm_share: float  # percent of the GPU's SMs this process kept busy; 0 when NVML had no sample


@dataclass(slots=True)
class ProcessSample:
    """One process (a GPU process or a child of one, e.g. a DataLoader worker) at one tick.

    Keyed by (pid, start_time): a pid can be reused, a start time cannot.
    Counters (cpu_seconds, read_bytes, write_bytes, iowait_seconds) are cumulative since the
    process started; None where the kernel would not tell us (permissions, no delay accounting).

    Never changed once built, like the other samples, but not declared frozen: one is built per
    process per tick, and a frozen dataclass's __init__ (object.__setattr__ per field) cost 3.4
    us against 0.5 for a plain one, 0.7 ms a tick at 256 processes (measured, Python 3.11).
    """

    pid: int
    start_time: float  # seconds since the epoch, as psutil.Process.create_time()
    ppid: int
    user: str
    command: str  # redacted at the source
    gpus: tuple[GpuUse, ...] = ()
    cpu_seconds: float = 0.0
    # CPU time of its children that exited and were waited for (cutime + cstime): their I/O is
    # in its own /proc/PID/io from then on, so a rate per CPU-second counts both.
    children_cpu_seconds: float = 0.0
    rss_bytes: int = 0
    read_bytes: int | None = None  # bytes it made the storage layer read (/proc/PID/io)
    write_bytes: int | None = None  # ...and write (page cache dirtied counts)
    read_chars: int | None = None  # bytes through read syscalls: files, pipes, sockets (rchar)
    write_chars: int | None = None  # bytes through write syscalls (wchar)
    iowait_seconds: float | None = None
    state: str = "S"  # R S D Z T ... as in /proc/PID/stat
    threads: int = 1
    threads_in_d: int = 0  # threads in uninterruptible (usually disk) sleep
    # Who owns it (daemon.sources.owners): pod_uid, container_id, slurm_job, systemd_unit, ...
    # read once from /proc/PID/cgroup; {} when nothing says.
    owner: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, float]:
        return (self.pid, self.start_time)


@dataclass(frozen=True, slots=True)
class HostPressure:
    """Host-wide PSI (/proc/pressure): stall percentages and cumulative microseconds."""

    io_some_avg10: float | None = None
    io_full_avg10: float | None = None
    cpu_some_avg10: float | None = None
    io_some_total_us: int | None = None
    io_full_total_us: int | None = None
    cpu_some_total_us: int | None = None


@dataclass(frozen=True, slots=True)
class HostUsageSample:
    """The host's CPU, memory and load (daemon.sources.host): CPU jiffies cumulative since boot
    (the busy share is derived between two samples), memory used = MemTotal - MemAvailable.
    A field is None where /proc does not say."""

    cpu_busy_ticks: int | None = None
    cpu_total_ticks: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    load: tuple[float, float, float] | None = None  # 1, 5 and 15 min averages
    cpus: int = 1


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything one tick saw. `nvml_status` is "ok" or why NVML gave nothing this tick."""

    ts: float  # seconds since the epoch, from daemon.clock
    tick: int  # 1, 2, 3 ... since the daemon started
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    host: HostPressure = field(default_factory=HostPressure)
    nvml_status: str = NVML_OK
    # None where it was not read: a sample rebuilt from the store (replay) has no host usage.
    host_usage: HostUsageSample | None = None
