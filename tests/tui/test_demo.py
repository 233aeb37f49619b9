"""The demo as a new user meets it (issue 25): the biggest recommendation, a resize, applies
against the simulated EC2 (dry run, confirmation, the resize done: the instance's type changes
in the simulated EC2), and the demo's snapshots outlive it in the user's state folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from simhost import pilot_wait_for, poll

from daemon.client import Client
from daemon.wire import SOCKET_PATH_MAX
from mlcost_tui.app import MlcostTop
from mlcost_tui.demo import EmbeddedDaemon, snapshots_folder
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.confirm import ConfirmScreen
from pricing.catalog import Catalog, catalog_accelerator

pytestmark = pytest.mark.xdist_group("serial")  # a whole demo host: eight GPUs, five workloads


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    """The user's folders in the test's own temp dir."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


# The demo's own rules advise the smaller instance after a minute and more (daemon/sim/
# simulate.toml: [cost] shrink_min_window = "1m", evaluated every 15 s, and the notebook's GPU
# counts as working until [idle] gpu_held_after = "1m" calls it held idle): this test is about
# applying the resize, so its demo waits the shortest the config allows. That the rule waits
# for its window is tests/daemon/test_rules.py's test_shrink_needs_a_long_enough_window; that
# a GPU held idle is not counted as working, test_release_then_shrink_counts_the_idle_gpu_once.
QUICK_SHRINK = {'evaluate_every = "15s"': 'evaluate_every = "5s"',
                'shrink_min_window = "1m"': 'shrink_min_window = "10s"',
                'gpu_held_after = "1m"': 'gpu_held_after = "10s"'}


class QuickShrinkDemo(EmbeddedDaemon):
    """The demo, its config as the demo writes it but with QUICK_SHRINK's settings."""

    def config_text(self) -> str:
        text = super().config_text()
        for demo_line, quick_line in QUICK_SHRINK.items():
            assert demo_line in text, f"{demo_line} is no longer in the demo's config"
            text = text.replace(demo_line, quick_line, 1)
        return text


@pytest.fixture
def demo(state_home):
    daemon = QuickShrinkDemo("demo")
    daemon.start()
    try:
        assert daemon.wait_ready(120), daemon.failure() or daemon.ec2_note
        yield daemon
    finally:
        daemon.stop()


def test_the_demo_keeps_snapshots_in_the_state_folder(state_home):
    assert snapshots_folder() == state_home / "mlcost" / "demo"
    demo = EmbeddedDaemon("demo", ec2=False)
    try:
        text = demo.config_text()
    finally:
        demo.stop()  # never started: it removes the folder it made
    assert f'folder = {json.dumps(str(state_home / "mlcost" / "demo"))}' in text
    assert text.count("[snapshots]") == 1


def instance_type(demo: EmbeddedDaemon) -> str:
    import boto3

    env = demo.ec2["env"]
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=env["AWS_ENDPOINT_URL_EC2"],
                       aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                       aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    found = ec2.describe_instances(InstanceIds=[demo.ec2["instance_id"]])
    return found["Reservations"][0]["Instances"][0]["InstanceType"]


def shown_type(app: MlcostTop) -> str | None:
    """The instance type of the host mlcost-top shows, as its daemon said last."""
    snap = app.shown_host
    return None if snap is None or snap.now is None else snap.now.instance.get("type")


@pytest.mark.asyncio
async def test_a_resizes_the_demo_host_on_the_simulated_ec2_and_snapshots_stay(demo):
    assert demo.ec2 is not None, demo.ec2_note  # moto is in the test extra
    assert instance_type(demo) == "p4d.24xlarge"
    app = MlcostTop([Client(demo.target)], interval_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        recs = app.query_one(RecommendationTable)

        def resize_row() -> int | None:
            for i, rec in enumerate(recs.recommendations.values()):
                if rec.action_kind == "resize":
                    return i
            return None

        await pilot_wait_for(pilot, lambda: resize_row() is not None, 240,
                             "the resize recommendation")
        # The host has an instance id: the row offers the resize itself, not commands only.
        assert recs.on_ec2
        # s: a snapshot, into the state folder
        await pilot.press("s")
        await pilot_wait_for(pilot, lambda: list(snapshots_folder().glob("*.db")), 120,
                             "the snapshot file")
        recs.focus()
        await pilot.pause()
        recs.move_cursor(row=resize_row())
        await pilot.pause()
        rec = recs.selected()
        assert rec is not None and rec.action_kind == "resize"
        await pilot.press("a")
        # (pushed, then composed: on a loaded host the first check came between the two)
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, ActionScreen)
                             and bool(app.screen.query("#running")), 60, "the dry run")
        dialog = app.screen
        assert dialog.result.dry_run and dialog.can_do
        assert (f"would ask AWS Systems Manager to run AWS-ResizeInstance on "
                f"{demo.ec2['instance_id']}") in dialog.result.message
        assert "stop: allowed" in dialog.result.message  # AWS's own dry run answered
        target = rec.action["to"]
        # it names what the stop takes down beside its buttons, the serving one first
        running = str(dialog.query_one("#running").render()).splitlines()
        assert "serving" in running[0] and "inference_server" in running[1], running
        assert "serves" in running[1], running
        # a minute of the evidence the advice needs: `y` asks again, and the daemon is told
        assert dialog.preliminary
        await pilot.press("y")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30,
                             "the second confirmation")
        await pilot.press("y")
        await pilot_wait_for(pilot, lambda: not isinstance(app.screen, ActionScreen), 30,
                             "the dialog to close")
        await pilot_wait_for(pilot, lambda: any(
            f"resizing {demo.ec2['instance_id']} to {target}" in str(n.message)
            for n in app._notifications), 120, "the resize's answer")
        # The runbook runs on the simulated SSM's side (as on AWS's, while the host is down).
        poll(lambda: instance_type(demo) == target, 60, "the instance's new type")
        # On AWS the host boots as the new type and mlcostd starts again on it, reading that
        # type: the simulated host boots again too, and the view follows (the header kept
        # p4d.24xlarge, its price and the resize advice).
        await pilot_wait_for(pilot, lambda: shown_type(app) == target, 180,
                             f"the daemon started again on a {target}")
        assert demo.boots == 1
        now = app.shown_host.now
        assert now.price is not None and now.price.per_hour == pytest.approx(
            rec.action["to_price_per_hour"], rel=1e-3)
        # with the new type's GPUs (they stayed the scenario's 8 A100s, and the new price was
        # spread over 8), each priced at its share of the type's price
        offer = Catalog.load().by_instance("aws", target, "us-east-1")
        assert offer is not None
        await pilot_wait_for(pilot, lambda: shown_type(app) == target
                             and app.shown_host.now.gpus, 60, "the rebooted host's GPUs")
        now = app.shown_host.now
        assert [(g.index, catalog_accelerator(g.name)) for g in now.gpus] == [
            (i, offer.accelerator) for i in range(offer.accelerator_count)]
        async with Client(demo.target) as client:
            raw = await client.now_raw()
        assert raw["price"]["gpu_count"] == offer.accelerator_count
        assert raw["price"]["per_gpu_per_hour"] == pytest.approx(
            now.price.per_hour / offer.accelerator_count)
        header = str(app.query_one(HeaderPanel).render())
        assert target in header and "p4d.24xlarge" not in header
        assert f"${now.price.per_hour:.2f}/h" in header
        # its rules have run (the demo always has advice) and the resize is not among it
        await pilot_wait_for(pilot, lambda: shown_type(app) == target
                             and app.shown_host.now.recommendations, 240,
                             "advice on the rebooted host")
        advice = app.shown_host.now.recommendations
        assert not [r for r in advice if r.action.get("kind") == "resize"], advice
    demo.stop()
    kept = demo.snapshot_files()
    assert kept and kept[0].parent == snapshots_folder()
    note = demo.exit_note()
    assert "snapshots are kept in" in note and "mlcost-top --replay" in note
    assert kept[0].name in note


def test_a_long_tmpdir_puts_the_demo_where_its_socket_fits(state_home, tmp_path, monkeypatch):
    """A $TMPDIR too deep for a Unix socket's path: the demo's daemon refused to bind there and
    mlcost-top waited on "starting…" for ever; the demo now makes its folder in /tmp."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    demo = EmbeddedDaemon("demo", ec2=False)
    try:
        assert demo.folder.parent == Path("/tmp")
        assert len(os.fsencode(demo.socket)) <= SOCKET_PATH_MAX
    finally:
        shutil.rmtree(demo.folder)
