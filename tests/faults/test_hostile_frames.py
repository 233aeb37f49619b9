"""A hostile local user against the root daemon's reading of source lines (probe 83, item 1).

mlcostd reads the line a stack frame points at to classify it, and quotes a line that calls
into C in the phase's reason. The frame's file name is the process's to choose: a process that
holds a GPU, drops to an unprivileged user and runs code compiled under the name of a file in
a folder only root may enter got that file's line quoted in /v1/now, the store and reports.

Here a real `mlcostd run --simulate` runs two such processes, each holding a simulated GPU,
then dropping to nobody (os.setresuid, as the probe did) and sleeping in code "from" a file:
one in a root-only 0700 folder (a 0644 file: its own mode bits let anyone read it), one in a
folder anyone may search, with a password assigned on the line. The first line must appear
nowhere (API, store, `mlcostd report --json`); the second appears with the password hidden.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import livedaemon
import pytest
from simhost import poll

from daemon.sources.stacks import find_py_spy

pytestmark = pytest.mark.skipif(find_py_spy() is None or os.geteuid() != 0,
                                reason="stack attribution needs py-spy and root")

HOSTILE = "hostile local user"
NOBODY = 65534
# A line no redaction touches: if any of it shows, the daemon read the root-only file.
HIDDEN_LINE = 'ROOT_ONLY_NOTE = "root-only-7f3a"; cfg.get()\n'
HIDDEN_MARK = "root-only-7f3a"
OPEN_LINE = 'DB_PASSWORD = "s3cr3t-hunter2"; cfg.get()\n'
SECRET = "s3cr3t-hunter2"
FAST_STACKS = {"attribution": {"dump_interval": "1s", "dumps_per_second": 5, "cpu_budget": 0.3,
                               "min_window": "2s"}}

# Holds its GPU as root, drops to nobody for good, then loops in code named after argv[1].
WORKLOAD = f"""
import os, sys
from daemon.sim.device import Device
gpu = Device(int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])).__enter__()
gpu.alloc(1 << 30)
os.setgroups([])
os.setresgid({NOBODY}, {NOBODY}, {NOBODY})
os.setresuid({NOBODY}, {NOBODY}, {NOBODY})
exec(compile("while True: __import__('time').sleep(0.5)\\n", sys.argv[1], "exec"))
"""


@pytest.fixture
def files() -> Iterator[dict[str, Path]]:
    """The two files, in a folder of the test's own that anyone may search (in /tmp:
    tmp_path's parents are root's 0700, which would hide both)."""
    top = Path(tempfile.mkdtemp(prefix="mlcost-frames-", dir="/tmp"))
    try:
        top.chmod(0o755)
        priv = top / "priv"
        priv.mkdir(mode=0o700)
        hidden = priv / "secret.txt"
        hidden.write_text(HIDDEN_LINE)
        hidden.chmod(0o644)
        public = top / "pub"
        public.mkdir(mode=0o755)
        readable = public / "settings.py"
        readable.write_text(OPEN_LINE)
        readable.chmod(0o644)
        for path in (hidden, readable):  # what the kernel says nobody may read
            done = subprocess.run(["cat", str(path)], user=NOBODY, capture_output=True)
            assert (done.returncode == 0) is (path == readable), path
        yield {"hidden": hidden, "readable": readable}
    finally:
        shutil.rmtree(top)


def scenario(folder: Path, files: dict[str, Path]) -> Path:
    text = ('[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
            '[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = 2\n')
    for gpu, (name, path) in enumerate(files.items()):
        command = [sys.executable, "-c", WORKLOAD, str(path)]
        text += (f'[[workloads]]\nname = "{name}"\ngpus = [{gpu}]\n'
                 f"command = {json.dumps(command)}\n")
    path = folder / "frames.toml"
    path.write_text(text)
    return path


def reasons(now: dict[str, Any], path: Path) -> str:
    """The phase reasons of the process whose command names `path`, as JSON text ("" before
    it has any)."""
    for proc in now["processes"]:
        if str(path) in proc.get("command", "") and proc.get("gpus") \
                and proc.get("phase_reasons"):
            return json.dumps(proc["phase_reasons"])
    return ""


@pytest.mark.fault(HOSTILE, "a frame names a 0644 file in a root-only folder; "
                            "a readable one assigns a password")
def test_a_line_its_user_cannot_read_never_shows_and_a_password_on_a_readable_one_is_hidden(
        mlcostd, tmp_path, files):
    daemon = mlcostd("idle-host", interval=1.0, config=FAST_STACKS,
                     args=["--simulate", str(scenario(tmp_path, files))])
    state: dict[str, Any] = {}

    def both_classified() -> bool:
        now = state["now"] = daemon.now()
        hidden, readable = reasons(now, files["hidden"]), reasons(now, files["readable"])
        # the readable line quoted (so lines are read and quoted), the hidden one classified
        return bool(hidden) and "cfg.get()" in readable

    poll(both_classified, 150, "both sleepers classified, the readable line quoted",
         every=1.0, explain=lambda: json.dumps(state.get("now", {}).get("processes"))[-3000:]
         + "\n" + daemon.log_tail())
    served = json.dumps(state["now"])
    assert HIDDEN_MARK not in served and "ROOT_ONLY_NOTE" not in served, served
    assert "DB_PASSWORD = <redacted>; cfg.get()" in reasons(state["now"], files["readable"])
    assert SECRET not in served
    assert daemon.stop() == 0, daemon.log_tail()
    report = subprocess.run(
        livedaemon.MLCOSTD + ["report", "--db", str(daemon.db), "--since", "1h", "--json"],
        capture_output=True, text=True, timeout=120, cwd=livedaemon.ROOT)
    assert report.returncode == 0, report.stderr
    assert "DB_PASSWORD = <redacted>" in report.stdout  # the report quotes the lines it has
    for text in (report.stdout, report.stderr, daemon.log()):
        assert HIDDEN_MARK not in text and SECRET not in text
    for stored in daemon.folder.glob("mlcost.db*"):  # the database, its WAL: every byte
        data = stored.read_bytes()
        assert HIDDEN_MARK.encode() not in data and SECRET.encode() not in data, stored


# Holds its GPU, then sleeps in a function named like an AWS access key id, in code "from" a
# file in a folder named `password=...`, beside a thread named like an OpenAI key that sleeps in
# a function named like a GitHub token. Each secret is put together at run time: the command
# line (redacted on its own) never holds one, so whatever shows one got it from a frame.
NAMED_WORKLOAD = """
import os, threading, time
from daemon.sim.device import Device
gpu = Device(int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])).__enter__()
gpu.alloc(1 << 30)
key, token = "AKIA" + "IOSFODNN7EXAMPLE", "ghp" + "_abcdefghijklmnopqrstuvwxyz0123456789"
where = "/srv/" + "pass" + "word=" + "hun" + "ter2" + "/train.py"
code = {}
exec(compile(f"def {key}():\\n    while True: time.sleep(0.5)\\n"
             f"def {token}():\\n    while True: time.sleep(0.5)\\n", where, "exec"),
     {"time": time}, code)
threading.Thread(target=code[token], name="sk-" + "abcdefghijklmnopqrstuvwxyz123456",
                 daemon=True).start()
code[key]()
"""
NAMED_SECRETS = ("AKIAIOSFODNN7EXAMPLE", "hunter2", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                 "sk-abcdefghijklmnopqrstuvwxyz123456")


async def _raw(socket_path: Path, path: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=str(socket_path))) as session:
        async with session.get("http://x" + path) as response:
            assert response.status == 200, (path, response.status, await response.text())
            return await response.text()


@pytest.mark.fault(HOSTILE, "a process names its function like an AWS key, its file "
                            "`password=...`, a thread like an API key")
def test_secrets_in_frame_and_thread_names_are_hidden_live_in_the_store_and_reports(
        mlcostd, tmp_path, monkeypatch):
    """Probe (redaction, third round): a stack frame's function and file names are the
    process's to choose, and mlcostd showed them as py-spy gave them: in /v1/now's and
    /v1/processes/{key}/phases' stacks, the store's stacks, `report`. So is the host name,
    here MLCOST_HOSTNAME (in /v1/now and every /metrics label). Each is redacted where it is
    read now; nothing of the secrets is served, stored or reported."""
    import asyncio

    monkeypatch.setenv("MLCOST_HOSTNAME", "gpu-" + "AKIA" + "IOSFODNN7EXAMPLE")
    scenario = tmp_path / "named.toml"
    scenario.write_text(
        '[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
        '[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = 1\n'
        '[[workloads]]\nname = "named"\ngpus = [0]\n'
        f"command = {json.dumps([sys.executable, '-c', NAMED_WORKLOAD])}\n")
    daemon = mlcostd("idle-host", interval=1.0, config=FAST_STACKS,
                     args=["--simulate", str(scenario)])
    state: dict[str, Any] = {}

    def stacks_shown() -> bool:
        now = state["now"] = daemon.now()
        for proc in now["processes"]:
            if proc.get("gpus") and proc.get("phase_reasons"):
                state["phases"] = asyncio.run(_raw(daemon.socket,
                                                   f"/v1/processes/{proc['key']}/phases"))
                return any(str(stack.get("file")).startswith("/srv/")  # its function's frame
                           for part in json.loads(state["phases"])["phases"].values()
                           for stack in part.get("top_stacks") or ())
        return False

    poll(stacks_shown, 150, "the sleeper's stacks in its phases", every=1.0,
         explain=lambda: json.dumps(state.get("now", {}).get("processes"))[-3000:]
         + "\n" + state.get("phases", "")[-2000:] + "\n" + daemon.log_tail())
    served = {"now": json.dumps(state["now"]), "phases": state["phases"],
              "metrics": asyncio.run(_raw(daemon.socket, "/metrics"))}
    assert daemon.stop() == 0, daemon.log_tail()
    report = subprocess.run(
        livedaemon.MLCOSTD + ["report", "--db", str(daemon.db), "--since", "1h", "--json"],
        capture_output=True, text=True, timeout=120, cwd=livedaemon.ROOT)
    assert report.returncode == 0, report.stderr
    served.update(report=report.stdout, log=daemon.log())
    leaks = {name: [w for w in NAMED_SECRETS if w in text] for name, text in served.items()}
    for stored in daemon.folder.glob("mlcost.db*"):  # the database, its WAL: every byte
        data = stored.read_bytes()
        leaks[stored.name] = [w for w in NAMED_SECRETS if w.encode() in data]
    assert not any(leaks.values()), json.dumps({k: v for k, v in leaks.items() if v})
    assert "/srv/password=<redacted>:2 <redacted>" in served["phases"], served["phases"]
    assert state["now"]["host"]["hostname"] == "gpu-<redacted>", state["now"]["host"]
    assert 'Hostname="gpu-<redacted>"' in served["metrics"]
