"""mlcostd: the recorder that runs on each GPU host (sources, store, service, CLI)."""

__version__ = "0.1.0"
