"""The config's sections as frozen dataclasses: every setting with its default, its help text,
its kind and its allowed range or choices (the field's metadata, which the loader checks and
`mlcostd config` prints). `Config` holds one of each; SECTIONS maps a TOML table to its class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.busy import (
    DEFAULT_GPU_HELD_AFTER_S,
    DEFAULT_GPU_UNHELD_AFTER_S,
    DEFAULT_HOST_IDLE_AFTER_S,
    DEFAULT_IDLE_UTILIZATION_PCT,
    DEFAULT_LONGEST_PERIOD_S,
)
from daemon.analysis.kinds import KINDS
from daemon.sources.podresources import DEFAULT_SOCKET as POD_RESOURCES_SOCKET


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
        "largest the database file may grow (its WAL not counted); over it the oldest data goes, "
        "raw samples first and the hour spend last, never this month's or the last 60 days'",
        "size", 1 << 20, 1 << 44))


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
        "do); empty: /metrics only on the API's listeners", "address"))
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
    mid_sm_share: float = field(default=60.0, metadata=_meta(
        "a process whose SM share (%) stays below this for mid_after, at or above "
        "low_sm_share, is in the middle band: its stacks are sampled too, less often (0: off)",
        "number", 0, 100))
    mid_after: float = field(default=15.0, metadata=_meta(
        "how long a process must stay below mid_sm_share before the middle band's sampling",
        "duration", 1, 3600))
    mid_dump_interval: float = field(default=10.0, metadata=_meta(
        "at most one stack dump per process in the middle band this often", "duration", 0.5,
        3600))
    mid_dumps_per_second: float = field(default=0.5, metadata=_meta(
        "at most this many middle-band dumps per second over all processes (within "
        "dumps_per_second)", "number", 0.01, 20))


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
    longest_period: float = field(default=DEFAULT_LONGEST_PERIOD_S, metadata=_meta(
        "a process that ran before (a run of kernels seen, or it held its GPU before mlcostd "
        "started) is a periodic job between runs until watched idle this long: looked at "
        "first, never SIGTERM, its host never 'stop'", "duration", 10, 30 * 86400))


@dataclass(frozen=True)
class CostConfig:
    jobs: dict = field(default_factory=dict, metadata=_meta(
        "job labels: name = regular expression on the command line (its first 1024 "
        "characters; no repeat inside a repeat)", "table"))
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
        "observe at least this long before advising a smaller instance (or a process dynamic "
        "batching)", "duration", 10,
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
        "most incident snapshots of one kind (a GPU lost, held idle, ...) in any hour (more "
        "triggers are logged and skipped); 0: none",
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


def with_overrides(config: Config, section: str, **values: Any) -> Config:
    """A copy with some settings replaced (command-line flags win over the file)."""
    current = getattr(config, section)
    return dataclasses.replace(config, **{section: dataclasses.replace(current, **values)})
