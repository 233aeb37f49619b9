"""Where the daemon's files are when the config does not say: the store, the API socket, the
snapshots folder and the live price cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.config.sections import Config
from daemon.wire import default_socket_path


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


def price_cache_path(config: Config) -> Path:
    """The live price cache: [pricing].cache, else pricing.cache.default_cache_path()."""
    if config.pricing.cache:
        return Path(config.pricing.cache)
    from pricing.cache import default_cache_path

    return default_cache_path()
