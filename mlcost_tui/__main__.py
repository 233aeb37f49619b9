"""`python -m mlcost_tui`: the same as the console script `mlcost-top`."""

from mlcost_tui.cli import console

console()
