"""Energy and carbon in mlcost-top: the process details screen shows a process's watts now,
its energy so far and its grams CO2e, or says carbon is unknown, at 80x24 and 200x50."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from mlcost_tui.screens.energy_section import energy_section
from tests.tui.fixtures import TS, StubClient, now_document


def with_energy(co2e_grams: float | None = 1530.0) -> Now:
    doc = now_document(processes=2)
    doc["processes"][0]["energy"] = {"watts": 255.4, "joules": 14_400_000.0, "kwh": 4.0,
                                     "co2e_grams": co2e_grams}
    return Now.from_dict(doc)


def test_the_section_names_watts_energy_and_carbon_or_says_carbon_is_unknown():
    now = with_energy()
    assert str(energy_section(now.processes[0])) == (
        "Energy 255 W now, 4.00 kWh so far, 1.53 kg CO2e\n")
    unknown = str(energy_section(with_energy(None).processes[0]))
    assert "carbon unknown" in unknown and "[energy]" in unknown
    assert str(energy_section(now.processes[1])) == ""  # drew nothing: no section


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_enter_on_a_process_shows_its_energy_and_carbon(size):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        now = with_energy()
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        table = app.query_one(ProcessPanel)
        table.focus()
        row = next(r for r in range(table.row_count)
                   if str(table.get_cell_at((r, 0))).strip() == str(now.processes[0].pid))
        table.move_cursor(row=row)
        await pilot.pause()
        app.action_details()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailsScreen)
        body = str(screen.query_one("#details-body", Static).render())
        assert "Energy 255 W now, 4.00 kWh so far, 1.53 kg CO2e" in body
