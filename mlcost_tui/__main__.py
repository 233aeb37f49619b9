"""`python -m mlcost_tui`: the same as the console script `mlcost-top`."""

from mlcost_tui.app import console

console()
