"""mlcost-top --prometheus without a Prometheus to read: a clear error at the command line for a
URL that is not one, and a screen that says Prometheus does not answer (and keeps trying). The
fleet table itself is tested against a real Prometheus in tests/deploy/test_fleet.py."""

from __future__ import annotations

import socket
import time

import pytest

from mlcost_tui.app import MlcostTop
from mlcost_tui.cli import main
from mlcost_tui.prometheus import FleetHost, PrometheusFleet
from mlcost_tui.screens.prometheus_fleet import PrometheusFleetScreen


def test_a_url_that_is_not_http_is_refused_with_an_example(capsys):
    assert main(["--prometheus", "prometheus:9090"]) == 2
    assert "is not an http(s):// URL (e.g. http://prometheus:9090)" in capsys.readouterr().err


def test_prometheus_and_connect_together_are_refused(capsys):
    assert main(["--prometheus", "http://127.0.0.1:9", "--connect", "unix:/x.sock"]) == 2
    assert "without --connect" in capsys.readouterr().err


def test_a_host_api_url_comes_from_its_instance_and_api_port():
    assert FleetHost("10.0.0.7:9400", True, api_port="9347").api_url == "http://10.0.0.7:9347"
    assert FleetHost("10.0.0.7:9400", True).api_url is None  # no TCP API there


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.asyncio
async def test_a_prometheus_that_does_not_answer_is_said_and_retried():
    url = f"http://127.0.0.1:{closed_port()}"
    screen = PrometheusFleetScreen(PrometheusFleet(url, timeout_s=2), interval_s=0.2)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(160, 30)) as pilot:
        summary = screen.query_one("#prometheus-summary")
        deadline = time.monotonic() + 20
        while "did not answer" not in str(summary.render()):
            assert time.monotonic() < deadline, str(summary.render())
            await pilot.pause(0.1)
        assert url in str(summary.render())
        assert app.screen is screen
        await pilot.press("enter")  # nothing to open: the screen stays
        await pilot.pause()
        assert app.screen is screen
