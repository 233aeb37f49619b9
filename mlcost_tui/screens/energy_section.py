"""The details screen's energy section: a process's share of its GPUs' measured power now, and
its energy and carbon so far (daemon.analysis.energy: above each GPU's idle floor by SM share,
the floor by memory held). Carbon is shown only where the daemon knows the grid intensity;
otherwise the section says it is unknown and how to set it.

One function, called once by the details screen. Figures come through daemon.wire."""

from __future__ import annotations

from rich.text import Text

from daemon.wire import Process
from mlcost_tui.thresholds import MUTED

UNKNOWN = "carbon unknown: no grid intensity (set [energy] in the daemon's config)"


def energy_amount(joules: float) -> str:
    """Joules in the unit a person reads: J, kJ, MJ below a kWh, kWh above."""
    if joules >= 3.6e6:
        return f"{joules / 3.6e6:,.2f} kWh"
    for unit, size in (("MJ", 1e6), ("kJ", 1e3)):
        if joules >= size:
            return f"{joules / size:,.1f} {unit}"
    return f"{joules:,.0f} J"


def carbon_amount(grams: float) -> str:
    return f"{grams / 1000:,.2f} kg CO2e" if grams >= 1000 else f"{grams:,.1f} g CO2e"


def energy_section(p: Process, exited: bool = False) -> Text:
    """Its watts now, energy so far and carbon; empty for a process that drew none (an older
    daemon, a replay, a GPU without power readings). `exited`: its watts are those it drew
    when last seen, its energy and carbon its total."""
    text = Text()
    energy = p.energy
    if energy is None or energy.joules is None:
        return text
    text.append("Energy ", style="bold")
    if energy.watts is not None:
        text.append(f"{energy.watts:,.0f} W {'when last seen' if exited else 'now'}, ")
    text.append(f"{energy_amount(energy.joules)} {'in all' if exited else 'so far'}")
    if energy.co2e_grams is not None:
        text.append(f", {carbon_amount(energy.co2e_grams)}\n")
    else:
        text.append(f"\n  {UNKNOWN}\n", style=MUTED)
    return text
