"""mlcost-top: the terminal UI of mlcost (talks to mlcostd's API only)."""
