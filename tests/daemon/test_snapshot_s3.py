"""Snapshot upload (daemon.runtime.s3_upload) against moto's S3 server on a free port: the
objects download byte-identical, with their content types, SSE-KMS and storage class, in parts
when large, with no secret in their metadata; a wrong bucket and a dropped connection keep the
local file and say why; `mlcostd snapshot --upload` end to end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from daemon.runtime.s3_upload import UploadError, parse_s3_url, upload_files
from daemon.store.snapshot import write_snapshot
from tests.daemon.scripted import T0, recording_daemon
from tests.livedaemon import ROOT

ACCESS_KEY, SECRET_KEY = "AKIASNAPSHOTTEST0001", "snapshot-secret-key-must-not-leak"
BUCKET = "mlcost-incidents"


@pytest.fixture(scope="module")
def endpoint(moto_endpoint) -> str:
    return moto_endpoint  # the session's moto server (tests/conftest.py)


@pytest.fixture
def aws(endpoint, monkeypatch) -> str:
    """boto3's usual chain pointed at moto (as an operator points it at an S3-compatible store)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", endpoint)
    s3 = boto3.client("s3")
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    return endpoint


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("s3")
    daemon = recording_daemon(folder, 5.0, ticks=20)
    assert daemon.store is not None
    daemon.store.close()
    snapshot = folder / "incident.db"
    write_snapshot(folder / "mlcost.db", snapshot, T0, T0 + 21)
    html = snapshot.with_suffix(".html")
    html.write_text("<!DOCTYPE html><html><body>report</body></html>")
    return snapshot, html


def test_upload_downloads_byte_identical_with_type_kms_and_class(aws, files, tmp_path):
    key_id = boto3.client("kms").create_key()["KeyMetadata"]["KeyId"]
    results = upload_files(list(files), f"s3://{BUCKET}/host-a/", sse_kms_key_id=key_id,
                           storage_class="STANDARD_IA")
    assert [r.ok for r in results] == [True, True], results
    assert [r.url for r in results] == [f"s3://{BUCKET}/host-a/incident.db",
                                        f"s3://{BUCKET}/host-a/incident.html"]
    s3 = boto3.client("s3")
    for local, want_type in zip(files, ("application/vnd.sqlite3", "text/html; charset=utf-8"),
                                strict=True):
        key = f"host-a/{local.name}"
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert head["ContentType"] == want_type
        assert head["ServerSideEncryption"] == "aws:kms" and key_id in head["SSEKMSKeyId"]
        assert head["StorageClass"] == "STANDARD_IA"
        assert head["Metadata"] == {"mlcost-version": head["Metadata"]["mlcost-version"],
                                    "mlcost-kind": "snapshot"}
        assert not any(secret in str(head["Metadata"]) for secret in (ACCESS_KEY, SECRET_KEY))
        copy = tmp_path / local.name
        s3.download_file(BUCKET, key, str(copy))
        assert copy.read_bytes() == local.read_bytes()
    assert all(f.exists() for f in files)  # uploading never moves the local files


def test_a_large_file_goes_up_in_parts(aws, tmp_path):
    big = tmp_path / "big.db"
    big.write_bytes(os.urandom(6 << 20) + b"end")
    [result] = upload_files([big], f"s3://{BUCKET}/parts", multipart_threshold=5 << 20)
    assert result.ok, result
    s3 = boto3.client("s3")
    head = s3.head_object(Bucket=BUCKET, Key="parts/big.db")
    assert head["ETag"].strip('"').endswith("-2")  # S3's ETag of a 2-part upload
    copy = tmp_path / "copy.db"
    s3.download_file(BUCKET, "parts/big.db", str(copy))
    assert copy.read_bytes() == big.read_bytes()


def test_a_wrong_bucket_keeps_the_file_and_says_so(aws, files):
    snapshot, _ = files
    [result] = upload_files([snapshot], "s3://no-such-bucket-here/x")
    assert not result.ok and result.url is None
    assert "bucket 'no-such-bucket-here' does not exist" in result.error
    assert f"the local file {snapshot} is kept" in result.error
    assert SECRET_KEY not in result.error and ACCESS_KEY not in result.error
    assert snapshot.exists()


@pytest.fixture
def dropping_endpoint() -> Iterator[str]:
    """A TCP port that accepts every connection and closes it at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    listener.close()


def test_a_dropped_connection_keeps_the_file_and_says_why(aws, files, dropping_endpoint,
                                                          monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", dropping_endpoint)
    snapshot, _ = files
    [result] = upload_files([snapshot], f"s3://{BUCKET}/dropped")
    assert not result.ok
    assert "could not reach S3" in result.error and "kept" in result.error, result.error
    assert snapshot.exists()


def test_a_malformed_url_is_refused_before_any_work():
    for bad in ("s3://", "s3://A_Bucket/x", "https://bucket/x", "bucket/x"):
        with pytest.raises(UploadError, match="s3://BUCKET/PREFIX"):
            parse_s3_url(bad)
    assert parse_s3_url("s3://my.bucket-1/a/b/") == ("my.bucket-1", "a/b")


def test_mlcostd_snapshot_upload_end_to_end(aws, files, tmp_path):
    snapshot, _ = files
    db = snapshot.parent / "mlcost.db"
    command = [sys.executable, "-m", "daemon.commands.cli", "snapshot", "--db", str(db),
               "--socket", str(tmp_path / "none.sock"), "--since", "10m", "--html",
               "--out", str(tmp_path / "cli.db")]
    def config(target: str) -> list[str]:  # the target is the config's, never a flag's
        path = tmp_path / f"{target.split('/')[2]}.toml"
        path.write_text(f'[snapshots]\nupload = "{target}"\n')
        return ["--config", str(path), "--upload"]

    done = subprocess.run(command + config(f"s3://{BUCKET}/cli"), capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert f"uploaded: s3://{BUCKET}/cli/cli.db" in done.stdout
    assert f"uploaded: s3://{BUCKET}/cli/cli.html" in done.stdout
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key="cli/cli.db")["Body"].read()
    assert body == (tmp_path / "cli.db").read_bytes()
    again = [*command[:-1], str(tmp_path / "cli2.db")]  # (an existing --out is never replaced)
    failed = subprocess.run(again + config("s3://missing-bucket-zz/cli"),
                            capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env=os.environ)
    assert failed.returncode == 1
    assert "upload failed: uploading cli2.db failed: bucket 'missing-bucket-zz' does not " \
           "exist" in failed.stdout
    assert (tmp_path / "cli2.db").exists() and "Traceback" not in failed.stderr


def test_an_upload_through_the_daemon_says_its_credentials_count_not_the_shells(
        aws, mlcostd, tmp_path):
    """Issue 25: a user exported AWS_PROFILE in the shell and asked for an upload; the daemon
    did it with its own credentials and nothing said so. The command now names the shell's
    AWS_* variables (never their values) that played no part, and each result says whose
    credentials count and how to set the daemon's."""
    target = f"s3://{BUCKET}/through-daemon"
    daemon = mlcostd("idle-host", config={"snapshots": {"upload": target, "html": False}})
    config = tmp_path / "client.toml"
    config.write_text(f'[snapshots]\nupload = "{target}"\n')
    shell = dict(os.environ, AWS_PROFILE="laptop-profile-zz")
    done = subprocess.run(
        [sys.executable, "-m", "daemon.commands.cli", "snapshot", "--config", str(config),
         "--socket", str(daemon.socket), "--since", "1m", "--upload"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=shell)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"uploaded: {target}/" in done.stdout
    note = next(line for line in done.stdout.splitlines() if line.startswith("note:"))
    assert "the daemon uploaded with its own AWS credentials, not this shell's" in note
    assert "AWS_PROFILE" in note and "laptop-profile-zz" not in done.stdout
    [result] = daemon.call("take_snapshot", 60, None, False, True)["upload"]
    assert "systemd unit" in result["credentials"] and "Environment=" in result["credentials"]


def test_a_failed_upload_by_the_daemon_ends_with_how_to_give_it_credentials():
    from daemon.runtime.s3_upload import by_the_daemon

    [failed, ok] = by_the_daemon([
        {"file": "a.db", "url": None, "ok": False, "error": "uploading a.db failed: no AWS "
                                                            "credentials found"},
        {"file": "a.html", "url": "s3://b/a.html", "ok": True, "error": None}])
    assert failed["error"].startswith("uploading a.db failed: no AWS credentials found. Note: "
                                      "the daemon uploads with its own AWS credentials")
    assert "EnvironmentFile=" in failed["error"] and ok["error"] is None
    assert ok["credentials"] == failed["credentials"]


def test_upload_through_a_daemon_goes_to_its_target_without_the_clients_config(
        aws, mlcostd, tmp_path):
    """A new user's repro: a daemon started with `--config up.toml` holding [snapshots].upload,
    then `mlcostd snapshot --socket ... --upload` without --config said "the config (defaults)
    sets no [snapshots].upload", exit 2, and never asked the daemon, which uploads to its own
    config's target (README "Uploading snapshots"). The daemon is asked and uploads; a daemon
    with no target answers why, and that is the command's one line, exit 2."""
    target = f"s3://{BUCKET}/daemon-target"
    daemon = mlcostd("idle-host", config={"snapshots": {"upload": target, "html": False}})
    command = [sys.executable, "-m", "daemon.commands.cli", "snapshot", "--since", "10s",
               "--upload", "--json"]
    shell = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # no S3 here
    done = subprocess.run([*command, "--socket", str(daemon.socket)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=shell)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    [upload] = result["upload"]
    assert upload["ok"] and upload["url"].startswith(f"{target}/"), upload
    key = upload["url"].removeprefix(f"s3://{BUCKET}/")
    assert boto3.client("s3").head_object(Bucket=BUCKET, Key=key)["ContentLength"] > 0
    # the upload is in its log, the AWS libraries' own INFO notes are not (probe 126 F12)
    assert "Found endpoint" not in daemon.log() and "botocore" not in daemon.log()
    untargeted = mlcostd("idle-host", config={"snapshots": {"html": False}})
    refused = subprocess.run([*command, "--socket", str(untargeted.socket)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT, env=shell)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout == "" and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("mlcostd snapshot: upload=true, but the daemon has no "
                                     "upload target"), refused.stderr
