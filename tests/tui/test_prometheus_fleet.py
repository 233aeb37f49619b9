"""mlcost-top --prometheus without a Prometheus to read: a clear error at the command line for a
URL that is not one, and a screen that says Prometheus does not answer (and keeps trying). A user
and password in the URL go to Prometheus as basic auth and never to the screen. The fleet table
itself is tested against a real Prometheus in tests/deploy/test_fleet.py."""

from __future__ import annotations

import asyncio
import base64
import socket
import time

import pytest
from aiohttp import web
from simhost import pilot_wait_for

from mlcost_tui.app import MlcostTop
from mlcost_tui.cli import main
from mlcost_tui.prometheus import FleetHost, PrometheusError, PrometheusFleet
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


async def said_unanswered(pilot, screen: PrometheusFleetScreen) -> str:
    """The screen's summary once it says Prometheus did not answer."""
    summary = screen.query_one("#prometheus-summary")
    deadline = time.monotonic() + 20
    while "did not answer" not in str(summary.render()):
        assert time.monotonic() < deadline, str(summary.render())
        await pilot.pause(0.1)
    return str(summary.render())


@pytest.mark.asyncio
async def test_a_prometheus_that_does_not_answer_is_said_and_retried():
    url = f"http://127.0.0.1:{closed_port()}"
    screen = PrometheusFleetScreen(PrometheusFleet(url, timeout_s=2), interval_s=0.2)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(160, 30)) as pilot:
        assert url in await said_unanswered(pilot, screen)
        assert app.screen is screen
        await pilot.press("enter")  # nothing to open: the screen stays
        await pilot.pause()
        assert app.screen is screen


@pytest.mark.asyncio
async def test_a_password_in_the_url_is_sent_as_basic_auth_and_never_shown():
    async def query(request: web.Request) -> web.Response:
        expected = "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()
        if request.headers.get("Authorization") != expected:
            return web.json_response({"status": "error", "error": "unauthorized"}, status=401)
        return web.json_response({"status": "success",
                                  "data": {"resultType": "vector", "result": []}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    right = PrometheusFleet(f"http://alice:s3cret-pw@127.0.0.1:{port}", timeout_s=5)
    wrong = PrometheusFleet(f"http://alice:wrong-s3cret@127.0.0.1:{port}", timeout_s=5)
    try:
        assert await right.query("up") == []  # the credentials went as basic auth
        assert right.shown_url == f"http://<redacted>@127.0.0.1:{port}"
        with pytest.raises(PrometheusError) as refused:
            await wrong.query("up")
        assert "s3cret" not in str(refused.value), refused.value
        assert f"127.0.0.1:{port}" in str(refused.value)
    finally:
        for fleet in (right, wrong):
            if fleet._session is not None:
                await fleet._session.close()
        await runner.cleanup()

    url = f"http://alice:s3cret-pw@127.0.0.1:{closed_port()}"  # and on the screen
    screen = PrometheusFleetScreen(PrometheusFleet(url, timeout_s=2), interval_s=0.2)
    top = MlcostTop([], prometheus=screen)
    async with top.run_test(size=(160, 30)) as pilot:
        shown = await said_unanswered(pilot, screen)
        assert "s3cret" not in shown and "<redacted>@127.0.0.1" in shown, shown


@pytest.mark.asyncio
async def test_help_on_the_prometheus_fleet_table_lists_its_keys_not_a_hosts():
    """`?` on the fleet table said "Mode: live" and listed enter on a GPU, click a header and
    the details screen's keys; while it was open the footer offered / < > I t p, which did
    nothing there."""
    from mlcost_tui.screens.help import HelpScreen

    url = f"http://127.0.0.1:{closed_port()}"
    screen = PrometheusFleetScreen(PrometheusFleet(url, timeout_s=2), interval_s=0.2)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(160, 30)) as pilot:
        await said_unanswered(pilot, screen)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.text().plain
        assert "Mode: fleet table, from Prometheus" in text, text
        assert "on a host: its live view" in text
        for host_key in ("on a GPU", "click a header", "Details screen", "Filter", "Pause"):
            assert host_key not in text, host_key
        # where its figures come from, the scrape jobs it reads and its marks (probe 121 F8:
        # it said "Figures come from mlcostd's API")
        about = " ".join(text.split())
        assert "mlcostd's API;" not in about and "Figures come from mlcostd" not in about
        assert "figures come from Prometheus" in about, about
        assert "--prometheus-job (here 'mlcost.*')" in about, about
        assert "marked '(last seen)'" in about and "not what it is now" in about, about
        assert "GPUs '4✕1': 4 GPUs, 1 of them lost" in about, about
        for action in ("filter", "sort", "invert", "tree", "pause", "history", "details"):
            assert app.check_action(action, ()) is False, action  # nor in the footer


class FixedFleet:
    """A PrometheusFleet that answers one fixed view."""

    shown_url = "http://prometheus:9090"
    job = "mlcost.*"

    def __init__(self, view) -> None:
        self.view = view

    async def fetch(self):
        return self.view

    async def close(self) -> None:
        pass


@pytest.mark.asyncio
async def test_at_80_columns_the_prometheus_fleet_table_keeps_its_figures_on_screen():
    """Long host names and scrape targets took the columns' whole length: at 80 columns the
    burn was the last figure on screen. The names are cut with `…` and the figures stay."""
    from mlcost_tui.prometheus import FleetView
    from mlcost_tui.screens.prometheus_fleet import PrometheusFleetTable
    from tests.tui.test_sizes import screen_text

    hosts = (FleetHost("gpu-node-017.training.example.internal:9400", True,
                       hostname="gpu-node-017.training.example.internal",
                       instance_type="p4d.24xlarge", burn_per_hour=32.77, wasted_per_hour=8.2,
                       gpus=8, idle_gpus=2, savings_per_month=1234.0,
                       top_rule="idle_gpu_held", top_rule_savings_per_month=900.0),
             FleetHost("gpu-node-018.training.example.internal:9400", False))
    screen = PrometheusFleetScreen(FixedFleet(FleetView(hosts)),  # type: ignore[arg-type]
                                   interval_s=60)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(80, 24)) as pilot:
        table = screen.query_one(PrometheusFleetTable)
        await pilot_wait_for(pilot, lambda: table.row_count == 2, what="the two hosts")
        await pilot.pause()
        # the savings stay and the scrape target goes first (probe 121 F8: the savings went
        # and the address, the least useful figure here, stayed the widest column)
        assert {"host", "burn", "wasted", "gpus", "idle", "saves"} <= set(table.shown_keys)
        assert "instance" not in table.shown_keys, table.shown_keys
        text = screen_text(app)
        heading = next(line for line in text if "burn $/h" in line)
        assert "idle GPUs" in heading and "all save/month" in heading, heading
        assert heading.rstrip().endswith("│") and "scraped at" not in heading, heading
        row = next(line for line in text if "$32.77" in line and "│" in line)
        assert "gpu-node-0…" in row and "$1,234" in row, text
        # the footer says what enter does, as the --connect table's does (probe 148 L6)
        assert "Open host" in text[-1] and "⏎" in text[-1], text[-1]
        # the host with no name shows its target in its place, as far as it fits
        unnamed = "gpu-node-018.training.example.internal:9400"
        assert str(table.get_row(unnamed)[0]) == "gpu-node-0…", table.get_row(unnamed)
        await pilot.resize_terminal(200, 30)  # wider: the other columns come back
        await pilot.pause()
        await pilot.pause()
        assert {"top", "instance"} <= set(table.shown_keys) and table.row_count == 2
        text = screen_text(app)
        heading = next(line for line in text if "burn $/h" in line)
        # the scrape target's column is named for what it holds, an address (probe 121 F8:
        # "scraped at" read as a time)
        assert " target " in heading and "scraped at" not in heading, heading
        row = table.get_row("gpu-node-018.training.example.internal:9400")
        assert str(row[0]) == "-" and str(row[1]).endswith(":9400"), row


def test_prometheus_job_goes_with_prometheus(capsys):
    assert main(["--prometheus-job", "gpus"]) == 2
    assert "use it with --prometheus URL" in capsys.readouterr().err


def on_screen(app) -> str:
    """The screen's text at its size, its lines joined by spaces (wrapped words rejoined)."""
    from tests.tui.test_sizes import screen_text

    return " ".join(line.strip(" │") for line in screen_text(app))


@pytest.mark.asyncio
async def test_at_80_columns_an_error_is_wrapped_not_cut():
    """Probe 121: the error line was cut at the screen's edge, and with it the exception and
    "check the URL"."""
    url = f"http://127.0.0.1:{closed_port()}"
    screen = PrometheusFleetScreen(PrometheusFleet(url, timeout_s=2), interval_s=0.2)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await said_unanswered(pilot, screen)
        await pilot.pause()
        text = on_screen(app)
        assert "did not answer (ClientConnectorError" in text and "check the URL" in text, text


@pytest.mark.asyncio
async def test_a_prometheus_with_no_mlcostd_says_which_jobs_it_read_and_what_to_do(tmp_path):
    """Probe 121: with no mlcost series (no daemon, or a scrape job not named mlcost…) the table
    read "0 daemons" and "idle GPUs 0", and nothing said why."""
    from promserver import Prometheus

    prometheus = Prometheus(tmp_path / "prometheus", [])  # a real one, scraping nothing
    try:
        screen = PrometheusFleetScreen(PrometheusFleet(prometheus.url), interval_s=0.5)
        app = MlcostTop([], prometheus=screen)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_wait_for(pilot, lambda: screen.view is not None, timeout=30,
                                 what="Prometheus's answer")
            await pilot.pause()
            text = on_screen(app)
            assert "idle GPUs -" in text and "idle GPUs 0" not in text, text
            assert f"No mlcostd at {prometheus.url}" in text, text
            assert "job=~'mlcost.*'" in text and "no mlcost_host_info under any job" in text
            assert 'README "On a fleet", Scraping' in text, text  # wrapped, all of it shown
    finally:
        prometheus.stop()


@pytest.mark.asyncio
async def test_a_url_that_answers_but_is_not_prometheus_says_the_http_status_and_the_url(
        tmp_path):
    """Probe 121: a real Prometheus asked under a path it does not serve answered HTTP 404,
    "404 page not found", and mlcost-top said it "did not answer (JSONDecodeError ...); check
    the URL". And an HTML page (a proxy's, a login) is not parsed as JSON either."""
    from promserver import Prometheus

    prometheus = Prometheus(tmp_path / "prometheus", [])
    try:
        fleet = PrometheusFleet(f"{prometheus.url}/prefix", timeout_s=10)
        try:
            with pytest.raises(PrometheusError) as caught:
                await fleet.query("up")
        finally:
            await fleet.close()
        said = str(caught.value)
        assert said.startswith(f"{prometheus.url}/prefix/api/v1/query answered HTTP 404 "), said
        assert "not the Prometheus API" in said and "JSONDecodeError" not in said, said
        assert "did not answer" not in said
        screen = PrometheusFleetScreen(PrometheusFleet(f"{prometheus.url}/prefix"),
                                       interval_s=0.5)
        app = MlcostTop([], prometheus=screen)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_wait_for(pilot, lambda: screen.error is not None, timeout=30,
                                 what="the error")
            await pilot.pause()
            text = on_screen(app)
            assert "answered HTTP 404" in text and "--web.route-prefix" in text, text
    finally:
        prometheus.stop()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")

    site = web.Application()
    site.router.add_get("/api/v1/query", page)
    runner = web.AppRunner(site)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    fleet = PrometheusFleet(url, timeout_s=5)
    try:
        with pytest.raises(PrometheusError) as caught:
            await fleet.query("up")
    finally:
        await fleet.close()
        await runner.cleanup()
    assert f"{url}/api/v1/query answered HTTP 200 OK (text/html)" in str(caught.value)


@pytest.mark.asyncio
async def test_a_down_host_keeps_its_last_seen_name_cut_before_its_mark():
    """Probe 121: a down row read "-" for its host, its scrape address all that was left. Its
    last known name shows, marked; where the column is narrow the name is cut, not the mark,
    while a few characters of it stay."""
    from mlcost_tui.prometheus import FleetView
    from mlcost_tui.screens.prometheus_fleet import PrometheusFleetTable, last_seen_name

    assert str(last_seen_name("gpu-node-017.example.internal", 24)) == "gpu-node-01… (last seen)"
    assert str(last_seen_name("gpu-node-017", 12)) == "gpu-node-01…"  # no room for both
    hosts = (FleetHost("10.0.0.7:9400", False, hostname="gpu-node-017",
                       instance_type="p4d.24xlarge", last_seen=True),
             FleetHost("10.0.0.8:9400", True, hostname="gpu-node-018", gpus=8, idle_gpus=0))
    screen = PrometheusFleetScreen(FixedFleet(FleetView(hosts)),  # type: ignore[arg-type]
                                   interval_s=60)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(200, 30)) as pilot:
        table = screen.query_one(PrometheusFleetTable)
        await pilot_wait_for(pilot, lambda: table.row_count == 2, what="the two hosts")
        row = table.get_row("10.0.0.7:9400")
        assert str(row[0]) == "gpu-node-017 (last seen)" and str(row[2]) == "down"
        assert str(row[3]) == "p4d.24xlarge"


@pytest.mark.asyncio
async def test_a_down_hosts_last_seen_mark_takes_the_scrape_targets_column_first():
    """Probe 156 F5: at 160 columns a down host read `train-a…` (its mark cut) while the scrape
    target's column, which a narrow terminal drops first, stayed. The target's column now goes
    before the mark does, and comes back when the host is up again."""
    from mlcost_tui.prometheus import FleetView
    from mlcost_tui.screens.prometheus_fleet import PrometheusFleetTable

    down = (FleetHost("127.0.0.1:47346", False, hostname="train-a",
                      instance_type="p4d.24xlarge", last_seen=True),
            FleetHost("127.0.0.1:47347", True, hostname="idle-b", gpus=1, idle_gpus=1),
            FleetHost("127.0.0.1:47348", True, gpus=1, idle_gpus=0))  # no name: its target
    fleet = FixedFleet(FleetView(down))
    screen = PrometheusFleetScreen(fleet, interval_s=60)  # type: ignore[arg-type]
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(160, 40)) as pilot:
        table = screen.query_one(PrometheusFleetTable)
        await pilot_wait_for(pilot, lambda: table.row_count == 3, what="the three hosts")
        row = table.get_row("127.0.0.1:47346")
        assert str(row[0]) == "train-a (last seen)" and str(row[1]) == "down", row
        assert "instance" not in table.shown_keys
        assert str(table.get_row("127.0.0.1:47348")[0]) == "127.0.0.1:47348"
        table.show(FleetView((down[1], down[2])))  # train-a gone: the target's column is back
        assert "instance" in table.shown_keys


def test_a_lost_gpu_is_marked_on_its_hosts_gpu_count_and_counted_in_the_header(
        mlcostd, tmp_path):
    """Probe 121 F8: a host with a GPU lost read "GPUs 4  idle GPUs 2" with no mark, while it
    is billed. A real mlcostd whose GPU 1 is lost, scraped by a real Prometheus: its row's GPU
    count carries the mark and how many are lost (mlcost_gpu_up 0), and the header counts
    them; a host with every GPU read has no mark."""
    from promserver import Prometheus
    from simhost import attach_code, host_toml

    from tests.daemon.test_metrics import metrics_port

    idle = attach_code(0, 1)
    lost = tmp_path / "lost.toml"
    lost.write_text('name = "lost"\n' + host_toml(gpus=2, workloads=[
        {"name": "notebook", "gpus": [0], "code": idle}],
        faults='[[faults]]\nkind = "gpu_lost"\ngpu = 1\nat_tick = 2\n'))
    whole = tmp_path / "whole.toml"
    whole.write_text('name = "whole"\n' + host_toml(gpus=2, workloads=[
        {"name": "notebook", "gpus": [0], "code": idle}]))
    daemons = {name: mlcostd(str(path), interval=0.5,
                             args=["--metrics-listen", "127.0.0.1:0"])
               for name, path in (("lost", lost), ("whole", whole))}
    targets = {name: f"127.0.0.1:{metrics_port(d)}" for name, d in daemons.items()}
    prometheus = Prometheus(tmp_path / "prometheus", list(targets.values()))
    try:
        asyncio.run(shown(prometheus.url, targets))
    finally:
        prometheus.stop()


async def shown(url: str, targets: dict[str, str]) -> None:
    """The fleet table at 200 columns once Prometheus has the lost GPU: the checks above."""
    from mlcost_tui.screens.prometheus_fleet import PrometheusFleetTable

    screen = PrometheusFleetScreen(PrometheusFleet(url), interval_s=0.5)
    app = MlcostTop([], prometheus=screen)
    async with app.run_test(size=(200, 30)) as pilot:
        table = screen.query_one(PrometheusFleetTable)
        await pilot_wait_for(pilot, lambda: screen.view is not None and any(
            h.lost_gpus for h in screen.view.hosts) and {
            h.instance for h in screen.view.hosts if h.gpus == 2} >= set(targets.values()),
            timeout=60, what="both hosts, and the lost GPU, in Prometheus's answer")
        await pilot.pause()
        hosts = {h.instance: h for h in screen.view.hosts}
        assert hosts[targets["lost"]].lost_gpus == 1, hosts
        assert hosts[targets["whole"]].lost_gpus == 0, hosts
        gpus = list(table.shown_keys).index("gpus")
        assert str(table.get_row(targets["lost"])[gpus]) == "2✕1"
        assert str(table.get_row(targets["whole"])[gpus]) == "2"
        header = " ".join(str(screen.query_one("#prometheus-summary").render()).split())
        assert "lost GPUs 1" in header, header
