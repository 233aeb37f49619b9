"""mlcostd while it runs: the tick loop that hands samples to the store and to analysis,
stack attribution beside it, the simulation wiring and systemd notification."""
