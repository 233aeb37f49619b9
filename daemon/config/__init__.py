"""The one config object: a TOML file where every setting has a default.

A bad key or value fails at start with the key, the value and what is allowed.

One module per job: sections.py (each section's settings, defaults and allowed values),
values.py (durations, sizes, addresses, s3:// locations), loading.py (the file, its TOML, the
checks with their errors), checks.py (rules across the keys of one section), cost_tables.py
([cost.budgets], [[cost.unit_costs]], [[cost.latency]]), paths.py (where files are when the
config does not say), defaults.py (the defaults as commented TOML). The names the rest of the
daemon uses are imported from here.
"""

from __future__ import annotations

from daemon.config.checks import check_energy, check_instance_price, check_pricing
from daemon.config.cost_tables import (
    BUDGET_PERIODS,
    LatencySetting,
    UnitCostSetting,
    check_budgets,
    latency_setting,
    unit_cost_setting,
)
from daemon.config.defaults import describe_defaults
from daemon.config.loading import (
    DEFAULT_CONFIG_PATH,
    MAX_CONFIG_BYTES,
    ConfigError,
    from_dict,
    load,
    parse_file,
)
from daemon.config.paths import (
    db_path,
    default_db_path,
    default_socket_path,
    price_cache_path,
    simulated_db_path,
    simulated_socket_path,
    snapshots_folder,
    socket_path,
    with_simulated_paths,
)
from daemon.config.sections import (
    SECTIONS,
    ApiConfig,
    AttributionConfig,
    Config,
    CostConfig,
    DaemonConfig,
    EnergyConfig,
    IdleConfig,
    InstanceConfig,
    KindsConfig,
    NvmlConfig,
    OwnersConfig,
    PricingConfig,
    ProcessesConfig,
    SnapshotsConfig,
    StoreConfig,
    with_overrides,
)
from daemon.config.values import (
    MAX_DURATION_S,
    MAX_S3_PREFIX,
    POSITIVE_DURATION,
    DurationTooLong,
    format_duration,
    parse_address,
    parse_duration,
    parse_s3_url,
    parse_size,
)

__all__ = [
    "BUDGET_PERIODS", "DEFAULT_CONFIG_PATH", "DurationTooLong", "MAX_CONFIG_BYTES", "MAX_DURATION_S", "MAX_S3_PREFIX",
    "POSITIVE_DURATION", "SECTIONS", "ApiConfig", "AttributionConfig", "Config", "ConfigError",
    "CostConfig", "DaemonConfig", "EnergyConfig", "IdleConfig", "InstanceConfig", "KindsConfig",
    "LatencySetting", "NvmlConfig", "OwnersConfig", "PricingConfig", "ProcessesConfig",
    "SnapshotsConfig", "StoreConfig", "UnitCostSetting", "check_budgets", "check_energy",
    "check_instance_price", "check_pricing", "db_path", "default_db_path", "default_socket_path",
    "describe_defaults", "format_duration", "from_dict", "latency_setting", "load", "parse_address",
    "parse_duration", "parse_file", "parse_s3_url", "parse_size", "price_cache_path",
    "simulated_db_path", "simulated_socket_path", "snapshots_folder", "socket_path", "unit_cost_setting", "with_overrides",
    "with_simulated_paths",
]
