"""Where a snapshot is uploaded is the config's choice only (issue 20, item 4): a request that
names a target gets a 400 saying the target is set in the config, `"upload": true` uploads to
`[snapshots].upload`, the config refuses a bad bucket or a `..` prefix, and `mlcostd snapshot
--upload URL` says the flag takes no target."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from daemon import config as config_module
from daemon.api.routes import _body
from daemon.api.snapshots import add_snapshot_routes
from daemon.config import Config, ConfigError, SnapshotsConfig
from tests.livedaemon import ROOT


class FakeDaemon:
    """The one part of the daemon the route uses: its config and take_snapshot."""

    def __init__(self, upload: str) -> None:
        self.config = Config(snapshots=SnapshotsConfig(upload=upload))
        self.asked: list[dict[str, Any]] = []

    async def take_snapshot(self, **kwargs: Any) -> dict[str, Any]:
        self.asked.append(kwargs)
        return {"path": "/nowhere/x.db", "upload": []}


def post(daemon: FakeDaemon, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async def main() -> tuple[int, dict[str, Any]]:
        app = web.Application()
        add_snapshot_routes(app, daemon, _body)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            response = await client.post("/v1/snapshots", json=body)
            return response.status, await response.json()

    return asyncio.run(main())


@pytest.mark.parametrize("target", ["s3://any-bucket/elsewhere", "s3://bucket/../../etc",
                                    "s3://mlcost-incidents/host-a"])
def test_a_request_that_names_an_upload_target_is_refused(target):
    daemon = FakeDaemon(upload="s3://mlcost-incidents/host-a")
    status, answer = post(daemon, {"since": "1m", "upload": target})
    assert status == 400, answer
    assert target in answer["error"]
    assert "[snapshots].upload" in answer["error"] and '"upload": true' in answer["error"]
    assert daemon.asked == []  # nothing written, nothing uploaded


def test_upload_true_uploads_to_the_configured_target_only():
    daemon = FakeDaemon(upload="s3://mlcost-incidents/host-a")
    status, answer = post(daemon, {"since": "1m", "upload": True})
    assert status == 201, answer
    assert [asked["upload"] for asked in daemon.asked] == [True]
    status, answer = post(daemon, {"since": "1m"})
    assert status == 201 and daemon.asked[-1]["upload"] is False


def test_upload_true_without_a_configured_target_says_how_to_set_one():
    daemon = FakeDaemon(upload="")
    status, answer = post(daemon, {"since": "1m", "upload": True})
    assert status == 400
    assert "no upload target" in answer["error"] and "[snapshots].upload" in answer["error"]
    assert daemon.asked == []
    status, answer = post(daemon, {"since": "1m", "upload": 1})
    assert status == 400 and "upload=1 must be true or false" in answer["error"]


@pytest.mark.parametrize("target, word", [
    ("s3://bucket/../../etc", "'..'"),
    ("s3://bucket/a/./b", "'.'"),
    ("s3://Bad_Bucket/x", "not a valid bucket name"),
    ("s3://a..b/x", "not a valid bucket name"),
    ("s3://192.168.1.10/x", "not a valid bucket name"),
    ("https://bucket/x", "not an S3 location"),
])
def test_the_config_refuses_a_bad_upload_target(tmp_path, target, word):
    path = tmp_path / "mlcostd.toml"
    path.write_text(f'[snapshots]\nupload = "{target}"\n')
    with pytest.raises(ConfigError) as caught:
        config_module.load(str(path))
    message = str(caught.value)
    assert "[snapshots].upload" in message and word in message and str(path) in message


def test_the_config_keeps_a_good_upload_target(tmp_path):
    path = tmp_path / "mlcostd.toml"
    path.write_text('[snapshots]\nupload = "s3://my.bucket-1/hosts/gpu-01/"\n')
    assert config_module.load(str(path)).snapshots.upload == "s3://my.bucket-1/hosts/gpu-01/"
    assert config_module.parse_s3_url("s3://my.bucket-1/hosts/gpu-01/") == (
        "my.bucket-1", "hosts/gpu-01")


def mlcostd_snapshot(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.commands.cli", "snapshot", "--db",
         str(tmp_path / "none.db"), "--socket", str(tmp_path / "none.sock"), *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=os.environ)


def test_mlcostd_snapshot_upload_takes_no_target(tmp_path):
    done = mlcostd_snapshot(tmp_path, "--since", "1m", "--upload", "s3://any-bucket/x")
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--upload takes no target" in done.stderr and "[snapshots].upload" in done.stderr
    assert "aws s3 cp FILE s3://any-bucket/x" in done.stderr


def test_mlcostd_snapshot_upload_without_a_configured_target_says_so(tmp_path):
    done = mlcostd_snapshot(tmp_path, "--since", "1m", "--upload")
    assert done.returncode == 2, done
    assert "sets no [snapshots].upload" in done.stderr and "Traceback" not in done.stderr


def test_mlcostd_snapshot_help_shows_upload_as_a_flag(tmp_path):
    """The help wrote `[--upload ]` (argparse's optional value with an empty metavar)."""
    done = mlcostd_snapshot(tmp_path, "--help")
    assert done.returncode == 0, done
    assert "[--upload]" in done.stdout and "--upload " + "]" not in done.stdout
    assert "\n  --upload  " in done.stdout  # its help line: the flag, then its text
