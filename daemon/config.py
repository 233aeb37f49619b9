"""The one config object: a TOML file where every setting has a default.

A bad key or value fails at start with the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from daemon.analysis.busy import (
    DEFAULT_GPU_HELD_AFTER_S,
    DEFAULT_GPU_UNHELD_AFTER_S,
    DEFAULT_HOST_IDLE_AFTER_S,
    DEFAULT_IDLE_UTILIZATION_PCT,
)
from daemon.analysis.kinds import KINDS
from daemon.sources.podresources import DEFAULT_SOCKET as POD_RESOURCES_SOCKET
from daemon.wire import default_socket_path as default_socket_path
from pricing.grid import find_region, grid_table

DEFAULT_CONFIG_PATH = Path("/etc/mlcost/mlcostd.toml")
MAX_CONFIG_BYTES = 1 << 20  # a config is a few kB; this bound keeps /dev/zero out of memory


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the key, the value and what fits."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, None: 1,
}


# No duration anyone means is longer than a century; past it a number is a unit slip (ms for
# s) or a hostile value (10**400 overflows float()).
MAX_DURATION_S = 100 * 365 * 86400.0


def parse_duration(value: str | int | float) -> float:
    """'90s', '15m', '6h', '8d', '250ms' or a number of seconds -> seconds: a finite number
    no longer than MAX_DURATION_S either way (a caller checks its own range, e.g. > 0).
    ValueError names the value and the forms (never OverflowError)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    else:
        match = _DURATION.match(str(value)[:100])
        if not match:
            raise ValueError(f"{str(value)[:80]!r} is not a duration (use e.g. 30s, 15m, 6h, "
                             "8d)")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not (math.isfinite(seconds) and abs(seconds) <= MAX_DURATION_S):
        shown = f"{str(value)[:40]}..." if len(str(value)) > 40 else str(value)
        raise ValueError(f"{shown!r} is not a duration of at most {MAX_DURATION_S:.0f} s "
                         "(100 years)")
    return seconds


_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_S3_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9!_.*'()\-]{1,255}")
MAX_S3_PREFIX = 512  # an S3 key is at most 1024 bytes; the file name needs the rest


def parse_s3_url(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX -> (bucket, prefix without slashes at its ends), for
    `[snapshots].upload`. The bucket follows S3's naming rules (3-63 lower-case letters,
    digits, dots and dashes; no '..'; not an IP address); the prefix is segments of S3's safe
    characters, none of them '.' or '..'. ValueError names the value and the form."""
    form = ("give s3://BUCKET/PREFIX (a bucket of 3-63 lower-case letters, digits, dots and "
            "dashes; a prefix of letters, digits and !_.*'()- between slashes)")
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise ValueError(f"{str(url)[:80]!r} is not an S3 location; {form}")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if (not _S3_BUCKET.fullmatch(bucket) or ".." in bucket or ".-" in bucket
            or "-." in bucket or re.fullmatch(r"[0-9.]+", bucket)):
        raise ValueError(f"{url[:80]!r}: {bucket[:70]!r} is not a valid bucket name; {form}")
    prefix = prefix.strip("/")
    if len(prefix) > MAX_S3_PREFIX:
        raise ValueError(f"{url[:80]!r}: the prefix is {len(prefix)} characters long; keep it "
                         f"under {MAX_S3_PREFIX}")
    for segment in prefix.split("/") if prefix else []:
        if segment in (".", "..") or not _S3_PREFIX_SEGMENT.fullmatch(segment):
            raise ValueError(f"{url[:80]!r}: the prefix segment {segment[:40]!r} is not "
                             f"allowed ('.', '..', empty or unusual characters); {form}")
    return bucket, prefix


def format_duration(seconds: float) -> str:
    """Seconds -> the largest whole unit: 21600 -> '6h', 90 -> '90s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def parse_size(value: str | int) -> int:
    """'512MiB', '1GiB', '2GB' or a number of bytes -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size (use e.g. 512MiB, 1GiB)")
    unit = match.group(2).lower() if match.group(2) else None
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_address(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as (host, port); ValueError says what fits."""
    host, sep, port = value.rpartition(":")
    if sep and host and port.isdigit():
        if int(port) > 65535:
            raise ValueError(f"port {int(port)} is out of range (0-65535)")
        return host.strip("[]"), int(port)
    raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9347)")


def _meta(help: str, kind: str = "", low: float | None = None, high: float | None = None,
          choices: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"help": help, "kind": kind, "low": low, "high": high, "choices": choices}


@dataclass(frozen=True)
class DaemonConfig:
    interval: float = field(default=1.0, metadata=_meta(
        "seconds between ticks", "duration", 0.1, 60))
    db: str = field(default="", metadata=_meta(
        "SQLite file; empty: /var/lib/mlcost/mlcost.db as root, "
        "$XDG_STATE_HOME/mlcost/mlcost.db (~/.local/state) otherwise", "path"))
    log_level: str = field(default="info", metadata=_meta(
        "log level", choices=("debug", "info", "warning", "error")))


@dataclass(frozen=True)
class StoreConfig:
    raw_retention: float = field(default=6 * 3600.0, metadata=_meta(
        "keep 1 s samples this long", "duration", 60, 90 * 86400))
    minute_retention: float = field(default=8 * 86400.0, metadata=_meta(
        "keep 1 min rollups this long", "duration", 3600, 5 * 365 * 86400))
    hour_retention: float = field(default=400 * 86400.0, metadata=_meta(
        "keep 1 h rollups this long", "duration", 86400, 20 * 365 * 86400))
    max_size: int = field(default=1 << 30, metadata=_meta(
        "largest the database may grow (oldest raw data goes first)", "size", 1 << 20, 1 << 44))


@dataclass(frozen=True)
class NvmlConfig:
    call_deadline: float = field(default=0.5, metadata=_meta(
        "longest one GPU's reading may take before it is marked timed out", "duration", 0.05, 30))
    retry_initial: float = field(default=1.0, metadata=_meta(
        "first retry after NVML fails to start", "duration", 0.1, 600))
    retry_max: float = field(default=60.0, metadata=_meta(
        "longest wait between NVML retries", "duration", 1, 3600))
    dcgm_exporter_url: str = field(default="", metadata=_meta(
        "dcgm-exporter's /metrics (e.g. http://localhost:9400/metrics): SM, tensor and DRAM "
        "activity are read from DCGM's profiling fields and GPM is never used; empty: GPM, "
        "unless nv-hostengine runs"))


@dataclass(frozen=True)
class ProcessesConfig:
    children: bool = field(default=True, metadata=_meta(
        "also record child processes of GPU processes (DataLoader workers)", "bool"))


@dataclass(frozen=True)
class InstanceConfig:
    provider: str = field(default="", metadata=_meta(
        "cloud provider override", choices=("", "aws", "gcp", "azure", "lambda", "on-prem")))
    type: str = field(default="", metadata=_meta("instance type override, e.g. p4d.24xlarge"))
    id: str = field(default="", metadata=_meta(
        "EC2 instance id a resize acts on (e.g. i-0abc...); empty: from the instance metadata"))
    region: str = field(default="", metadata=_meta("region override, e.g. us-east-1"))
    lifecycle: str = field(default="", metadata=_meta(
        "pricing lifecycle override (commit-1y/commit-3y where the catalog lists them, else "
        "on-demand as the upper bound)",
        choices=("", "on-demand", "spot", "commit-1y", "commit-3y")))
    price_per_hour: float = field(default=0.0, metadata=_meta(
        "host price in USD per hour (off-cloud, or to override the catalog); 0: not set",
        "number", 0, 10000))
    # Off-cloud hosts (bought, hosted and powered by their owner): see pricing.offcloud.
    price_per_gpu_hour: float = field(default=0.0, metadata=_meta(
        "off-cloud: USD per GPU-hour (e.g. a CoreWeave-style rate); 0: not set", "number",
        0, 1000))
    purchase_price: float = field(default=0.0, metadata=_meta(
        "off-cloud: what the host cost in USD, amortized over amortization_years; 0: not set",
        "number", 0, 1e8))
    amortization_years: float = field(default=0.0, metadata=_meta(
        "off-cloud: years over which purchase_price is written off (needed with it)",
        "number", 0, 30))
    hosting_per_month: float = field(default=0.0, metadata=_meta(
        "off-cloud: USD per month for rack space, cooling and network", "number", 0, 1e7))
    electricity_per_kwh: float = field(default=0.0, metadata=_meta(
        "USD per kWh: the GPUs' measured power is priced beside the burn; 0: not priced",
        "number", 0, 10))


@dataclass(frozen=True)
class PricingConfig:
    cache: str = field(default="", metadata=_meta(
        "live price cache that `mlcostd prices --refresh` writes and the daemon reads; empty: "
        "$MLCOST_PRICE_CACHE, else ~/.cache/mlcost/prices.json of the user running it", "path"))
    extra_catalogs: list = field(default_factory=list, metadata=_meta(
        "CSV price sheets in the bundled catalog's format (e.g. CoreWeave per-GPU-hour rows)",
        "list"))
    gcp_api_key_file: str = field(default="", metadata=_meta(
        "file (mode 0600) with the API key for `mlcostd prices --refresh gcp`", "path"))
    catalog_url: str = field(default="", metadata=_meta(
        "base URL of the SkyPilot catalogs for `mlcostd prices --refresh catalog`; empty: the "
        "public skypilot-catalog repository"))
    compare_managed: bool = field(default=False, metadata=_meta(
        "show the managed-platform price of this hardware (SageMaker, Vertex AI or Azure ML, by "
        "the host's cloud) in the report's review, "
        "also when the host is not a managed ml.* instance", "bool"))


@dataclass(frozen=True)
class ApiConfig:
    socket: str = field(default="", metadata=_meta(
        "unix socket of the HTTP API; empty: /run/mlcost/mlcostd.sock as root, "
        "$XDG_RUNTIME_DIR/mlcost/mlcostd.sock otherwise", "path"))
    listen: str = field(default="", metadata=_meta(
        "also serve the API on TCP HOST:PORT (then a bearer token is required); empty: no TCP",
        "address"))
    token_file: str = field(default="", metadata=_meta(
        "file holding the TCP bearer token (mode 0600; created if missing); empty: "
        "mlcostd.token beside the socket", "path"))
    allow_actions: bool = field(default=False, metadata=_meta(
        "let API clients apply recommendations that change the host (SIGTERM, resize)", "bool"))
    max_connections: float = field(default=256.0, metadata=_meta(
        "most concurrent connections per API listener; at the limit the longest-open idle one "
        "is closed", "number", 1, 4096))
    request_timeout: float = field(default=20.0, metadata=_meta(
        "a connection must send a whole request (head and body) within this; idle keep-alive "
        "connections are closed after it", "duration", 1, 600))
    metrics_listen: str = field(default="", metadata=_meta(
        "also serve Prometheus /metrics alone on TCP HOST:PORT, without a token (as exporters "
        "do); empty: /metrics only on the API's listeners"))
    metrics_label_values: float = field(default=128.0, metadata=_meta(
        "most distinct values per workload label in /metrics (job_name, pod, namespace, "
        "container, slurm_job, user); the rest read \"other\"", "number", 1, 100000))


@dataclass(frozen=True)
class AttributionConfig:
    low_sm_share: float = field(default=30.0, metadata=_meta(
        "a process whose SM share (%) is below this is in a low-utilization window", "number",
        0, 100))
    high_sm_share: float = field(default=40.0, metadata=_meta(
        "...and leaves it when its SM share is back above this (hysteresis)", "number", 0, 100))
    min_window: float = field(default=3.0, metadata=_meta(
        "how long a dip must last to count as a window", "duration", 0.5, 600))
    stacks: bool = field(default=True, metadata=_meta(
        "sample Python stacks with py-spy during windows; false: phases from /proc alone "
        "(lower confidence, as where ptrace is denied)", "bool"))
    dump_interval: float = field(default=2.0, metadata=_meta(
        "at most one stack dump per process this often", "duration", 0.5, 600))
    dumps_per_second: float = field(default=2.0, metadata=_meta(
        "at most this many stack dumps per second over all processes", "number", 0.01, 20))
    cpu_budget: float = field(default=0.02, metadata=_meta(
        "py-spy may use at most this fraction of one CPU core", "number", 0.001, 0.5))


@dataclass(frozen=True)
class IdleConfig:
    utilization: float = field(default=DEFAULT_IDLE_UTILIZATION_PCT, metadata=_meta(
        "a GPU below this utilization (%) is idle", "number", 0, 100))
    gpu_held_after: float = field(default=DEFAULT_GPU_HELD_AFTER_S, metadata=_meta(
        "a GPU held by a process but idle this long raises an idle event", "duration", 10,
        86400))
    gpu_unheld_after: float = field(default=DEFAULT_GPU_UNHELD_AFTER_S, metadata=_meta(
        "a GPU with no process, idle this long, raises an idle event", "duration", 10, 86400))
    host_after: float = field(default=DEFAULT_HOST_IDLE_AFTER_S, metadata=_meta(
        "every GPU idle (or none in use) this long: 'stop this instance'", "duration", 10,
        7 * 86400))


@dataclass(frozen=True)
class CostConfig:
    jobs: dict = field(default_factory=dict, metadata=_meta(
        "job labels: name = regular expression on the command line", "table"))
    budgets: dict = field(default_factory=dict, metadata=_meta(
        "budgets: [cost.budgets.host] daily/monthly, [cost.budgets.user.NAME], "
        "[cost.budgets.job.NAME], webhook = URL", "table"))
    storage_paths: list = field(default_factory=list, metadata=_meta(
        "checkpoint/data folders whose size is priced", "list"))
    unit_costs: list = field(default_factory=list, metadata=_meta(
        "[[cost.unit_costs]] target = job name or PID:START, url = Prometheus /metrics URL, "
        "metric = counter name, unit = tokens|requests, per = 1000000 (labels optional)",
        "tables"))
    latency: list = field(default_factory=list, metadata=_meta(
        "[[cost.latency]] target = job name or PID:START, url = Prometheus /metrics URL, "
        "metric = latency histogram name (seconds), labels optional: p50/p99 beside the cost",
        "tables"))
    storage_price_per_gb_month: float = field(default=0.08, metadata=_meta(
        "USD per GB-month for storage_paths", "number", 0, 100))
    evaluate_every: float = field(default=30.0, metadata=_meta(
        "how often the recommendation rules run", "duration", 5, 3600))
    recommendation_hold: float = field(default=300.0, metadata=_meta(
        "a recommendation stays shown until its condition has been false this long, then it "
        "is resolved with a notice; 0: it goes at the first evaluation without it",
        "duration", 0, 86400))
    shrink_min_window: float = field(default=600.0, metadata=_meta(
        "observe at least this long before advising a smaller instance", "duration", 10,
        30 * 86400))
    spot_min_runtime: float = field(default=7200.0, metadata=_meta(
        "a training job running this long (with regular checkpoints) is advised spot",
        "duration", 10, 30 * 86400))
    rightsize_evidence: float = field(default=108000.0, metadata=_meta(
        "observe this long before advice on a smaller instance is confident (before: "
        "preliminary); AWS Compute Optimizer asks 30 h", "duration", 60, 90 * 86400))
    spot_evidence: float = field(default=86400.0, metadata=_meta(
        "observe this long before spot advice is confident (before: preliminary)",
        "duration", 60, 90 * 86400))
    commitment_evidence: float = field(default=604800.0, metadata=_meta(
        "observe this long before commitment advice is confident (before: preliminary); "
        "AWS Cost Explorer's shortest Savings Plans look-back is 7 days", "duration", 60,
        365 * 86400))


@dataclass(frozen=True)
class KindsConfig:
    """[kinds]: what a job is when the classifier cannot tell (README "Workload kinds")."""

    jobs: dict = field(default_factory=dict, metadata=_meta(
        "a workload kind per job label, e.g. \"my-job\" = \"online_inference\": the label "
        "as [cost.jobs] names it (else the owner's workload such as \"ns/pod\" or \"slurm 42\", "
        "else the script, e.g. \"serve.py\"); the kind is one of " + ", ".join(KINDS)
        + "; it replaces the classified kind, with the evidence 'set in config'", "table"))


@dataclass(frozen=True)
class OwnersConfig:
    slurm_job_info_dir: str = field(default="", metadata=_meta(
        "folder where a Slurm prolog writes one file per job id with account= and partition= "
        "lines (README \"Who owns a process\"); empty: none", "path"))
    pod_resources_socket: str = field(
        default=POD_RESOURCES_SOCKET, metadata=_meta(
            "the kubelet's pod-resources socket (pod, namespace and container of each GPU; "
            "needs grpcio: pip install 'mlcost[kubernetes]'); used where it exists; empty: "
            "never", "path"))


@dataclass(frozen=True)
class SnapshotsConfig:
    """[snapshots]: where incident snapshots go, when they are taken, how many are kept."""

    folder: str = field(default="", metadata=_meta(
        "folder of snapshots (0700); empty: snapshots/ beside the database", "path"))
    before: float = field(default=900.0, metadata=_meta(
        "an incident snapshot starts this long before its trigger", "duration", 10, 6 * 3600))
    after: float = field(default=60.0, metadata=_meta(
        "...and is taken this long after it", "duration", 0, 3600))
    max_per_hour: float = field(default=4.0, metadata=_meta(
        "most incident snapshots in any hour (more triggers are logged and skipped); 0: none",
        "number", 0, 120))
    max_total_size: int = field(default=512 << 20, metadata=_meta(
        "the snapshots folder is kept under this size (oldest go first)", "size", 1 << 20,
        1 << 40))
    max_age: float = field(default=30 * 86400.0, metadata=_meta(
        "snapshots older than this are deleted", "duration", 3600, 5 * 365 * 86400))
    html: bool = field(default=True, metadata=_meta(
        "write the HTML report beside each incident snapshot", "bool"))
    on_gpu_lost: bool = field(default=True, metadata=_meta(
        "snapshot when a GPU is lost or its readings time out", "bool"))
    gpu_timeout_after: float = field(default=30.0, metadata=_meta(
        "readings that time out are an incident only when they time out on at least half "
        "the ticks of this span (3 or more): a loaded host answers late now and then",
        "duration", 0, 3600))
    on_host_idle: bool = field(default=True, metadata=_meta(
        "snapshot when a host idle event opens", "bool"))
    held_idle_after: float = field(default=3600.0, metadata=_meta(
        "snapshot when a GPU has been held idle this long; 0: never", "duration", 0,
        30 * 86400))
    on_budget: bool = field(default=True, metadata=_meta(
        "snapshot when a budget is crossed", "bool"))
    recommendation_savings: float = field(default=1000.0, metadata=_meta(
        "snapshot when a new recommendation saves at least this many USD per month; 0: never",
        "number", 0, 1e9))
    upload: str = field(default="", metadata=_meta(
        "where snapshots are uploaded, s3://BUCKET/PREFIX: every incident snapshot, and one "
        "taken by hand that asks for it (the API and `mlcostd snapshot --upload` cannot name "
        "another); empty: keep them local", "s3"))
    sse_kms_key_id: str = field(default="", metadata=_meta(
        "KMS key (id, alias or ARN) for SSE-KMS on upload; empty: the bucket's default"))
    storage_class: str = field(default="", metadata=_meta(
        "S3 storage class of uploaded snapshots; empty: STANDARD", choices=(
            "", "STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR",
            "GLACIER", "DEEP_ARCHIVE", "REDUCED_REDUNDANCY")))


@dataclass(frozen=True)
class EnergyConfig:
    """[energy]: the grid intensity that turns the GPUs' measured energy into grams CO2e."""

    grid_intensity_g_per_kwh: float = field(default=0.0, metadata=_meta(
        "grams CO2e per kWh of this host's electricity (your utility's or grid operator's "
        "figure, on premises or where the table lacks the region); 0: the bundled table's "
        "annual average for the cloud region, else carbon unknown", "number", 0, 2000))
    region: str = field(default="", metadata=_meta(
        "cloud region whose grid average to use from the bundled table (e.g. us-east-1, "
        "us-central1, eastus); empty: the detected or [instance] region"))


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    nvml: NvmlConfig = field(default_factory=NvmlConfig)
    processes: ProcessesConfig = field(default_factory=ProcessesConfig)
    instance: InstanceConfig = field(default_factory=InstanceConfig)
    pricing: PricingConfig = field(default_factory=PricingConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    attribution: AttributionConfig = field(default_factory=AttributionConfig)
    idle: IdleConfig = field(default_factory=IdleConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    kinds: KindsConfig = field(default_factory=KindsConfig)
    owners: OwnersConfig = field(default_factory=OwnersConfig)
    snapshots: SnapshotsConfig = field(default_factory=SnapshotsConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    source: str = "defaults"  # where this config came from, for logs and `check`


SECTIONS: dict[str, type] = {
    f.name: f.type if isinstance(f.type, type) else globals()[f.type]  # type: ignore[misc]
    for f in dataclasses.fields(Config) if f.name != "source"
}


def _convert(section: str, f: dataclasses.Field, value: Any, where: str) -> Any:
    meta = f.metadata
    kind, low, high, choices = meta["kind"], meta["low"], meta["high"], meta["choices"]
    key = f"[{section}].{f.name}"
    try:
        if kind == "duration":
            result: Any = parse_duration(value)
        elif kind == "size":
            result = parse_size(value)
        elif kind == "table":
            if not isinstance(value, dict):
                raise ValueError("must be a table")
            result = value
        elif kind == "tables":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ValueError("must be a list of tables ([[...]] in TOML)")
            result = value
        elif kind == "list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError("must be a list of strings")
            result = value
        elif kind == "s3":
            if not isinstance(value, str):
                raise ValueError("must be a string")
            if value:
                parse_s3_url(value)
            result = value
        elif kind == "address":
            if not isinstance(value, str):
                raise ValueError("must be a string")
            if value:
                parse_address(value)
            result = value
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ValueError("must be true or false")
            result = value
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError("must be a number")
            result = float(value)
        else:
            if not isinstance(value, str):
                raise ValueError("must be a string")
            result = value
    except ValueError as exc:
        raise ConfigError(f"{where}: {key} = {value!r}: {exc}; {meta['help']}") from None
    if choices and result not in choices:
        allowed = ", ".join(repr(c) for c in choices if c) + (" or empty" if "" in choices else "")
        raise ConfigError(f"{where}: {key} = {value!r}: allowed values are {allowed}")
    if low is not None and not (low <= result <= high):
        unit = {"duration": " seconds", "size": " bytes"}.get(kind, "")
        raise ConfigError(
            f"{where}: {key} = {value!r}: must be between {low:g} and {high:g}{unit} ({meta['help']})")
    return result


def from_dict(data: dict[str, Any], where: str = "config") -> Config:
    """Build a Config from parsed TOML, rejecting unknown sections and keys."""
    sections: dict[str, Any] = {}
    for name, body in data.items():
        if name not in SECTIONS:
            raise ConfigError(
                f"{where}: unknown section [{name}]; allowed sections: {', '.join(SECTIONS)}")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: [{name}] must be a table, got {body!r}")
        cls = SECTIONS[name]
        known = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in body.items():
            if key not in known:
                raise ConfigError(
                    f"{where}: unknown key [{name}].{key}; allowed keys in [{name}]: "
                    f"{', '.join(known)}")
            values[key] = _convert(name, known[key], value, where)
        sections[name] = cls(**values)
    config = Config(**sections, source=where)
    try:
        check_budgets(config.cost.budgets)
    except ValueError as exc:
        raise ConfigError(f"{where}: [cost.budgets]: {exc}") from None
    for number, meter in enumerate(config.cost.unit_costs, start=1):
        try:
            unit_cost_setting(meter)
        except ValueError as exc:
            raise ConfigError(f"{where}: [[cost.unit_costs]] #{number}: {exc}") from None
    for number, histogram in enumerate(config.cost.latency, start=1):
        try:
            latency_setting(histogram)
        except ValueError as exc:
            raise ConfigError(f"{where}: [[cost.latency]] #{number}: {exc}") from None
    for name, pattern in config.cost.jobs.items():
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"{where}: [cost.jobs].{name} = {pattern!r}: not a regular "
                              f"expression ({exc})") from None
    for name, kind in config.kinds.jobs.items():
        if kind not in KINDS:
            raise ConfigError(f"{where}: [kinds.jobs].{name} = {kind!r}: not a workload kind; "
                              f"allowed values are {', '.join(repr(k) for k in KINDS)}")
    url = config.nvml.dcgm_exporter_url
    if url and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: [nvml].dcgm_exporter_url = {url[:120]!r}: must be an "
                          "http(s) URL of dcgm-exporter's /metrics, e.g. "
                          "http://localhost:9400/metrics")
    try:
        check_energy(config.energy)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if config.attribution.high_sm_share < config.attribution.low_sm_share:
        raise ConfigError(
            f"{where}: [attribution].high_sm_share = {config.attribution.high_sm_share:g} is "
            f"below low_sm_share = {config.attribution.low_sm_share:g}; it must be at least that")
    try:
        check_instance_price(config.instance)
        check_pricing(config.pricing)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if config.nvml.retry_max < config.nvml.retry_initial:
        raise ConfigError(
            f"{where}: [nvml].retry_max = {config.nvml.retry_max:g} is below "
            f"[nvml].retry_initial = {config.nvml.retry_initial:g}; it must be at least as long")
    return config


def check_energy(energy: EnergyConfig) -> None:
    """One grid intensity: a figure or a region, and a region the table knows. ValueError
    names the key, the value and the fix."""
    region = energy.region.strip()
    if energy.grid_intensity_g_per_kwh > 0 and region:
        raise ValueError(f"[energy].grid_intensity_g_per_kwh = "
                         f"{energy.grid_intensity_g_per_kwh:g} and [energy].region = "
                         f"{region[:64]!r} are two ways to set the grid intensity; keep one")
    if region and find_region(region) is None:
        known = sorted({r for _, r in grid_table()})
        raise ValueError(f"[energy].region = {region[:64]!r} is not in the grid table "
                         f"(pricing/data/grid_intensity.csv, {len(known)} regions, e.g. "
                         f"{', '.join(known[:6])}); set [energy].grid_intensity_g_per_kwh "
                         "to your grid's figure instead")


def check_instance_price(instance: InstanceConfig) -> None:
    """One way to price the host: price_per_hour, price_per_gpu_hour, or purchase_price with
    amortization_years; hosting only with an off-cloud price. ValueError names the keys."""
    set_prices = [name for name in ("price_per_hour", "price_per_gpu_hour", "purchase_price")
                  if getattr(instance, name) > 0]
    if len(set_prices) > 1:
        values = ", ".join(f"[instance].{name} = {getattr(instance, name):g}"
                           for name in set_prices)
        raise ValueError(f"{values}: these are exclusive ways to price the host; keep one "
                         "(price_per_hour for the whole host, price_per_gpu_hour per GPU, or "
                         "purchase_price with amortization_years)")
    if instance.purchase_price > 0 and instance.amortization_years <= 0:
        raise ValueError(f"[instance].purchase_price = {instance.purchase_price:g} needs "
                         "[instance].amortization_years > 0 (the years it is written off over, "
                         "e.g. 4)")
    if instance.amortization_years > 0 and instance.purchase_price <= 0:
        raise ValueError(f"[instance].amortization_years = {instance.amortization_years:g} "
                         "amortizes nothing: set [instance].purchase_price too")
    if instance.hosting_per_month > 0 and not (instance.purchase_price > 0
                                               or instance.price_per_gpu_hour > 0):
        raise ValueError(f"[instance].hosting_per_month = {instance.hosting_per_month:g} adds to "
                         "an off-cloud price: set [instance].purchase_price (with "
                         "amortization_years) or [instance].price_per_gpu_hour")


def check_pricing(pricing: PricingConfig) -> None:
    """[pricing]: an http(s) catalog_url, and extra catalogs that exist and parse."""
    if pricing.catalog_url and not pricing.catalog_url.startswith(("http://", "https://")):
        raise ValueError(f"[pricing].catalog_url = {pricing.catalog_url!r}: must be an http(s) "
                         "URL of a folder holding <cloud>/vms.csv")
    from pricing.catalog import load_offers_csv

    for path in pricing.extra_catalogs:
        try:
            load_offers_csv(path)
        except OSError as exc:
            raise ValueError(f"[pricing].extra_catalogs: cannot read {path!r}: "
                             f"{exc.strerror or exc}; fix the path or remove it") from None
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"[pricing].extra_catalogs: {path!r} is not a catalog CSV ({exc}); "
                             "use the header of pricing/data/catalog.csv") from None


def price_cache_path(config: Config) -> Path:
    """The live price cache: [pricing].cache, else pricing.cache.default_cache_path()."""
    if config.pricing.cache:
        return Path(config.pricing.cache)
    from pricing.cache import default_cache_path

    return default_cache_path()


BUDGET_PERIODS = ("daily", "monthly")


def check_budgets(table: dict[str, Any]) -> None:
    """[cost.budgets] is host / user.NAME / job.NAME tables of daily and/or monthly dollars,
    and an optional webhook URL; ValueError names the key, the value and what is allowed.
    (The budgets themselves are built by daemon.analysis.budgets; config stays plain data.)"""
    for key, value in table.items():
        if key == "webhook":
            if not isinstance(value, str) or not value.startswith(("http://", "https://")):
                raise ValueError(f"[budgets].webhook = {value!r}: must be an http(s) URL")
        elif key == "host":
            _check_periods(value, "[budgets.host]")
        elif key in ("user", "job"):
            if not isinstance(value, dict):
                raise ValueError(f"[budgets.{key}] must be a table of name = {{daily, monthly}}")
            for name, limits in value.items():
                _check_periods(limits, f"[budgets.{key}.{name}]")
        else:
            raise ValueError(f"unknown key [budgets].{key}; allowed: host, user, job, webhook")


def _check_periods(limits: Any, where: str) -> None:
    if not isinstance(limits, dict):
        raise ValueError(f"{where} must be a table with daily and/or monthly dollars")
    for period, limit in limits.items():
        if period not in BUDGET_PERIODS:
            raise ValueError(f"{where}.{period}: unknown period; allowed: daily, monthly")
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            raise ValueError(f"{where}.{period} = {limit!r}: must be a number of dollars > 0")


@dataclass(frozen=True)
class UnitCostSetting:
    """One [[cost.unit_costs]] table, checked: dollars per `per` units of a Prometheus counter
    for a job or a process. The runtime turns it into a daemon.analysis.meters.UnitCostMeter."""

    target: str
    url: str
    metric: str
    unit: str = "tokens"
    per: float = 1_000_000.0
    labels: dict[str, str] = field(default_factory=dict)


_UNIT_COST_KEYS: dict[str, type | tuple[type, ...]] = {"target": str, "url": str, "metric": str, "unit": str, "per": (int, float),
                   "labels": dict}


def unit_cost_setting(table: dict[str, Any]) -> UnitCostSetting:
    """A [[cost.unit_costs]] table as a UnitCostSetting; ValueError names the key."""
    for key, value in table.items():
        if key not in _UNIT_COST_KEYS:
            raise ValueError(f"unknown key {key!r}; allowed: {', '.join(_UNIT_COST_KEYS)}")
        if not isinstance(value, _UNIT_COST_KEYS[key]) or isinstance(value, bool):
            raise ValueError(f"{key} = {value!r} has the wrong type")
    for key in ("target", "url", "metric"):
        if not table.get(key):
            raise ValueError(f"{key} is required")
    if not str(table["url"]).startswith(("http://", "https://")):
        raise ValueError(f"url = {table['url']!r}: must be an http(s) URL of a /metrics page")
    if table.get("per", 1) <= 0:
        raise ValueError(f"per = {table['per']!r}: must be > 0")
    return UnitCostSetting(**table)


@dataclass(frozen=True)
class LatencySetting:
    """One [[cost.latency]] table, checked: a Prometheus latency histogram (in seconds) of a
    server, for a job or a process. The runtime turns it into a
    daemon.analysis.latency.LatencyMeter."""

    target: str
    url: str
    metric: str
    labels: dict[str, str] = field(default_factory=dict)


_LATENCY_KEYS: dict[str, type] = {"target": str, "url": str, "metric": str, "labels": dict}


def latency_setting(table: dict[str, Any]) -> LatencySetting:
    """A [[cost.latency]] table as a LatencySetting; ValueError names the key."""
    if not isinstance(table, dict):
        raise ValueError(f"{table!r} is not a table")
    for key, value in table.items():
        if key not in _LATENCY_KEYS:
            raise ValueError(f"unknown key {key!r}; allowed: {', '.join(_LATENCY_KEYS)}")
        if not isinstance(value, _LATENCY_KEYS[key]):
            raise ValueError(f"{key} = {value!r} has the wrong type")
    for key in ("target", "url", "metric"):
        if not table.get(key):
            raise ValueError(f"{key} is required")
    if not str(table["url"]).startswith(("http://", "https://")):
        raise ValueError(f"url = {table['url']!r}: must be an http(s) URL of a /metrics page")
    labels = table.get("labels") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError(f"labels = {labels!r}: names and values must be strings")
    return LatencySetting(**table)


unit_cost_meter = unit_cost_setting  # the old name, until tests/daemon/test_config.py moves on


def load(path: str | os.PathLike[str] | None) -> Config:
    """Read a config file; None reads the default path if it exists, else returns defaults."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Config()
        path = DEFAULT_CONFIG_PATH
    return from_dict(parse_file(Path(path)), where=str(path))


def parse_file(path: Path) -> dict[str, Any]:
    """The TOML in `path`, read only if it is a regular file of at most MAX_CONFIG_BYTES (a FIFO
    would block the start, /dev/zero would fill memory). ConfigError says what is wrong."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: opened, not waited on
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory opens too, then cannot be read
        os.close(fd)
        raise ConfigError(f"config file {path} is not a regular file; pass --config with a "
                          "TOML file")
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB; "
                          "is it the right file?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} on line "
                          f"{line}); save the file as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return data


def default_db_path() -> Path:
    """Where the store lives when neither the config nor --db says."""
    if os.geteuid() == 0:
        return Path("/var/lib/mlcost/mlcost.db")
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "mlcost" / "mlcost.db"


def socket_path(config: Config) -> Path:
    return Path(config.api.socket) if config.api.socket else default_socket_path()


def db_path(config: Config) -> Path:
    return Path(config.daemon.db) if config.daemon.db else default_db_path()


def snapshots_folder(config: Config) -> Path:
    """Where snapshots go: [snapshots].folder, else snapshots/ beside the database."""
    if config.snapshots.folder:
        return Path(config.snapshots.folder)
    return db_path(config).parent / "snapshots"


def with_overrides(config: Config, section: str, **values: Any) -> Config:
    """A copy with some settings replaced (command-line flags win over the file)."""
    current = getattr(config, section)
    return dataclasses.replace(config, **{section: dataclasses.replace(current, **values)})


def describe_defaults() -> str:
    """The default config as TOML with a comment per key, for `mlcostd config` and the README."""
    lines = []
    for name, cls in SECTIONS.items():
        lines.append(f"[{name}]")
        for f in dataclasses.fields(cls):
            factory: Any = f.default_factory  # set wherever a field has no plain default
            default = f.default if f.default is not dataclasses.MISSING else factory()
            kind = f.metadata["kind"]
            if kind == "duration":
                shown = f'"{format_duration(default)}"'
            elif kind == "size":
                shown = f'"{default >> 20}MiB"'
            elif f.metadata["kind"] in ("table", "list", "tables"):
                shown = "{}" if f.metadata["kind"] == "table" else "[]"
            elif isinstance(default, bool):
                shown = "true" if default else "false"
            elif isinstance(default, str):
                shown = f'"{default}"'
            else:
                shown = f"{default:g}" if isinstance(default, float) else str(default)
            lines.append(f"{f.name} = {shown}  # {f.metadata['help']}")
        lines.append("")
    return "\n".join(lines)
