"""mlcost-top's main screen is what stays on for hours, so what it loads is what it keeps: its
client asks the daemon for one JSON document a second through the standard library, and the
config, the price catalog and aiohttp (8-10 MB of its RSS together, bench/tui_idle.py) stay
with the daemon and the screens that need them; the other screens (details, a GPU, history,
help, the dialogs) load when their key is pressed. A fresh interpreter takes the path `mlcost-top
--connect` takes (cli's parser, the client, the App polling it until it shows the failed poll)
and reports which modules it loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (pricing.http, the bounded reader, is for it; the catalog and instance detection are not)
NOT_FOR_THE_MAIN_SCREEN = ("aiohttp", "yarl", "multidict", "daemon.config", "pricing.catalog",
                           "pricing.detect", "mlcost_tui.screens", "mlcost_tui.plot")

POLL_IN_A_FRESH_INTERPRETER = """
import asyncio, json, sys
from daemon.client import Client
from mlcost_tui import cli
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.header import HeaderPanel

args = cli.build_parser().parse_args(["--connect", "unix:" + sys.argv[1]])

async def polled():
    app = MlcostTop([Client(t) for t in args.connect], interval_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        while not any(h.error for h in app.hosts):
            await pilot.pause(0.05)
        return app.hosts[0].error

error = asyncio.run(polled())
print(json.dumps({"error": error, "modules": sorted(sys.modules)}))
"""


def test_polling_a_daemon_loads_neither_aiohttp_nor_the_config_nor_the_catalog_nor_other_screens(tmp_path):
    result = subprocess.run([sys.executable, "-c", POLL_IN_A_FRESH_INTERPRETER,
                             str(tmp_path / "no-daemon.sock")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["error"].startswith(f"no mlcostd at unix:{tmp_path}")  # the poll really ran
    loaded = [m for m in report["modules"]
              if any(m == name or m.startswith(name + ".") for name in NOT_FOR_THE_MAIN_SCREEN)]
    assert loaded == []
