"""Where the daemon's files are when the config does not say: the store, the API socket, the
snapshots folder and the live price cache.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from daemon.config.sections import Config, with_overrides
from daemon.wire import default_socket_path


def default_db_path() -> Path:
    """Where the store lives when neither the config nor --db says."""
    if os.geteuid() == 0:
        return Path("/var/lib/mlcost/mlcost.db")
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "mlcost" / "mlcost.db"


def state_home() -> Path:
    """$XDG_STATE_HOME, else ~/.local/state (the XDG base directory default), whoever runs it."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if state and os.path.isabs(state):
        return Path(state)
    return Path(os.path.expanduser("~/.local/state"))


def _scenario_folder(scenario: str) -> str:
    """A folder name for a --simulate scenario: a built-in's name, a scenario file's name without
    .toml, with what is not a letter, digit, dot, dash or underscore as `_`."""
    name = Path(scenario).stem if scenario.endswith(".toml") or os.sep in scenario else scenario
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64].lstrip(".")
    return name or "scenario"


def simulated_db_path(scenario: str) -> Path:
    """Where `mlcostd run --simulate SCENARIO` records when neither the config nor --db says: a
    store of the scenario's own in the user's state folder (root's too), never this host's
    store: a simulated host's samples in it would read as this host's cost history."""
    return state_home() / "mlcost" / "simulated" / _scenario_folder(scenario) / "mlcost.db"


def simulated_socket_path(scenario: str) -> Path:
    """Where `mlcostd run --simulate SCENARIO` serves its API when neither the config nor --socket
    says: the user's runtime folder (root's too), never the socket this host's daemon serves on,
    where `mlcost-top` and `mlcostd idle` would take the simulated host for this one."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/mlcost-{os.geteuid()}"
    return Path(runtime) / "mlcost" / "simulated" / _scenario_folder(scenario) / "mlcostd.sock"


def with_simulated_paths(config: Config, scenario: str | None) -> Config:
    """`config` as `--simulate SCENARIO` uses it: the store and the API socket that neither the
    config nor a flag names are the scenario's own (simulated_db_path, simulated_socket_path).
    The one place that decides them, for `mlcostd run` and `mlcostd check` alike: check looked
    at this host's default store while run recorded into the scenario's, and passed a damaged
    one (probe 155 M2). No scenario: `config` as it is."""
    if not scenario:
        return config
    if not config.daemon.db:
        config = with_overrides(config, "daemon", db=str(simulated_db_path(scenario)))
    if not config.api.socket:
        config = with_overrides(config, "api", socket=str(simulated_socket_path(scenario)))
    return config


def socket_path(config: Config) -> Path:
    return Path(config.api.socket) if config.api.socket else default_socket_path()


def db_path(config: Config) -> Path:
    return Path(config.daemon.db) if config.daemon.db else default_db_path()


def snapshots_folder(config: Config) -> Path:
    """Where snapshots go: [snapshots].folder, else snapshots/ beside the database."""
    if config.snapshots.folder:
        return Path(config.snapshots.folder)
    return db_path(config).parent / "snapshots"


def price_cache_path(config: Config) -> Path:
    """The live price cache: [pricing].cache, else pricing.cache.default_cache_path()."""
    if config.pricing.cache:
        return Path(config.pricing.cache)
    from pricing.cache import default_cache_path

    return default_cache_path()
