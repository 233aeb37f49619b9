"""The idleness answer (`mlcostd idle`, GET /v1/idle) under real daemons, and the README's
autostop snippets run as written.

The snippets are read from the README section "Is this host idle? (autostop)" (its
`<!-- autostop: NAME -->` blocks: a crontab line, SkyPilot's `run`, dstack's `commands`), so the
docs and this test cannot drift. They run in bash with stand-ins on PATH: `mlcostd` (this
checkout's, pointed at the test's daemon, with `--for` shortened to what the test daemon has
recorded), `shutdown` and `python` (they only log that they were called) and `sleep` (logs, and
stops the script on its third call: a watch loop still waiting after three checks has not seen
the host idle). The demo host (trainers and a server) must never be stopped, the idle host
must be, and so must no host when no daemon answers.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import livedaemon
import pytest
import yaml
from simhost import poll

from daemon.commands import idle as idle_command
from daemon.config import parse_duration
from daemon.store.reader import StoreReader

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Is this host idle? (autostop)"
SNIPPET = re.compile(r"<!-- autostop: (\w+) -->\n```(\w+)\n(.*?)```", re.S)
SHORT_FOR = "5s"
CHECKS_BEFORE_GIVING_UP = 3
SCRIPT_TIMEOUT_S = 180.0  # a safety net only: every script ends by itself or by `sleep`


def readme_snippets() -> dict[str, str]:
    """NAME -> the shell script each `<!-- autostop: NAME -->` block of the README runs."""
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    section = text[start:text.index("\n## ", start + len(SECTION))]
    scripts = {}
    for name, language, body in SNIPPET.findall(section):
        if language == "crontab":  # minute hour day month weekday user command
            scripts[name] = "\n".join(line.split(None, 6)[6] for line in body.splitlines()
                                      if line.strip() and not line.startswith("#"))
        elif language == "yaml":
            document = yaml.safe_load(body)
            scripts[name] = document["run"] if "run" in document else "\n".join(
                document["commands"])
        else:
            pytest.fail(f"README autostop block {name!r} is {language!r}: crontab or yaml")
    return scripts


def test_the_readme_has_the_cron_skypilot_and_dstack_snippets():
    scripts = readme_snippets()
    assert set(scripts) == {"cron", "skypilot", "dstack"}
    assert all("mlcostd idle --for 30m" in script for script in scripts.values())


def stand_ins(folder: Path) -> Path:
    """A bin folder of stand-ins; each logs its call to $IDLE_TEST_LOG."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    scripts = {
        "mlcostd": f"""#!{sys.executable}
import os, sys
sys.path.insert(0, {str(ROOT)!r})
args = sys.argv[1:]
if "--for" in args:
    args[args.index("--for") + 1] = os.environ["IDLE_TEST_FOR"]
args[1:1] = ["--connect", os.environ["IDLE_TEST_TARGET"]]
with open(os.environ["IDLE_TEST_LOG"], "a") as log:
    log.write("mlcostd " + " ".join(args) + "\\n")
from daemon.commands.cli import main
code = main(args)
with open(os.environ["IDLE_TEST_LOG"], "a") as log:
    log.write(f"mlcostd exit {{code}}\\n")
sys.exit(code)
""",
        "shutdown": '#!/bin/sh\necho "shutdown $*" >> "$IDLE_TEST_LOG"\n',
        "python": '#!/bin/sh\necho "python $*" >> "$IDLE_TEST_LOG"\n',
        "sleep": f"""#!/bin/sh
echo "sleep $*" >> "$IDLE_TEST_LOG"
if [ "$(grep -c '^sleep' "$IDLE_TEST_LOG")" -ge {CHECKS_BEFORE_GIVING_UP} ]; then
    echo "given up: still active" >> "$IDLE_TEST_LOG"
    kill $PPID
fi
""",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def run_snippet(script: str, folder: Path, target: str, for_: str = SHORT_FOR) -> list[str]:
    """Run one README script against `target`; the stand-ins' log, a line per call."""
    folder.mkdir()
    log = folder / "calls.log"
    log.touch()
    env = dict(os.environ, PATH=f"{stand_ins(folder)}:{os.environ['PATH']}",
               IDLE_TEST_LOG=str(log), IDLE_TEST_TARGET=target, IDLE_TEST_FOR=for_)
    subprocess.run(["bash", "-c", script], env=env, cwd=folder, timeout=SCRIPT_TIMEOUT_S,
                   stdin=subprocess.DEVNULL, capture_output=True)
    return log.read_text().splitlines()


def idle_json(target: str, for_: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "daemon", "idle", "--connect", target,
                           "--for", for_, "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, json.loads(done.stdout)


def idle_answer(target: str, for_: str) -> dict[str, Any]:
    """What `mlcostd idle --connect TARGET --for FOR --json` prints, asked from this process
    through the function the command runs (daemon.commands.idle.ask). For the waits, which ask
    again and again: a `python -m daemon` start costs ~0.5 CPU-s, and polling the command every
    0.2 s made this the costliest module of the suite (57 CPU-s); the checks themselves still
    run the command (idle_json)."""
    return idle_command.ask(target, None, parse_duration(for_), idle_command.DEFAULT_TIMEOUT_S)


def check_never_stopped(calls: list[str], name: str) -> None:
    assert not any(c.startswith("shutdown") for c in calls), (name, calls)
    if name != "cron":  # the watch loop: the work started, and the loop kept waiting
        assert "python train.py" in calls, (name, calls)
        assert calls[-1] == "given up: still active", (name, calls)
        assert calls.count("mlcostd exit 1") == CHECKS_BEFORE_GIVING_UP, (name, calls)


# ---------------------------------------------------------------------------- the idle host


def wait_idle(target: str) -> dict[str, Any]:
    """The idle host's answer once it is idle for SHORT_FOR. Polled before each check: on a
    loaded machine the shared daemon may miss ticks for a while, and a hole in its history
    rightly answers active (fail safe)."""
    last: list[dict[str, Any]] = [{}]

    def idle() -> dict[str, Any] | None:
        last[0] = idle_answer(target, SHORT_FOR)
        if last[0].get("active") is not False:
            return None
        code, last[0] = idle_json(target, SHORT_FOR)  # idle: the command answers the same
        return last[0] if code == 0 else None

    return poll(idle, 90, f"the idle host answering idle for {SHORT_FOR}", every=0.5,
                explain=lambda: json.dumps(last[0], indent=1))


@pytest.fixture(scope="module")
def idle_target(shared_daemon) -> str:
    """The shared idle-host daemon, once it has recorded SHORT_FOR with its GPU idle."""
    target = f"unix:{shared_daemon.socket}"
    wait_idle(target)
    return target


def test_the_idle_host_answers_idle_with_its_evidence(idle_target):
    answer = wait_idle(idle_target)
    assert answer["version"] == 1 and answer["active"] is False
    assert answer["basis"] == "measured" and 0 < answer["confidence"] <= 1
    assert answer["idle_for_s"] >= 5 and answer["since"] <= answer["ts"] - 5
    assert [g["busy"] for g in answer["gpus"]] == [False]
    (notebook,) = answer["processes"]
    assert notebook["active"] is False and notebook["evidence"] == []


def test_the_idle_host_is_active_for_longer_than_it_has_recorded(idle_target):
    code, answer = idle_json(idle_target, "1d")
    assert code == 1
    assert answer["active"] is True and answer["basis"] == "fail_safe"
    assert "less than the asked 86400 s" in answer["reason"]


@pytest.mark.parametrize("name", ["cron", "skypilot", "dstack"])
def test_the_readme_snippets_stop_the_idle_host(idle_target, tmp_path, name):
    # The shared daemon can miss ticks on a loaded machine between the wait and the snippet's
    # own check, and a hole in its history rightly answers active: the snippet must then not
    # stop the host, and is run again once the host answers idle again (3 tries at most).
    for attempt in range(3):
        wait_idle(idle_target)
        calls = run_snippet(readme_snippets()[name], tmp_path / f"{name}-{attempt}", idle_target)
        if "mlcostd exit 0" in calls:
            break
        assert not any(c.startswith("shutdown") for c in calls), calls
    assert "mlcostd exit 0" in calls, calls
    if name == "cron":
        assert calls[-1] == 'shutdown -h now mlcostd: GPUs idle for 30 min', calls
    else:  # the watch ended at its first check, so the task ends and autostop takes over
        assert calls.count("mlcostd exit 0") == 1 and "given up: still active" not in calls


# ---------------------------------------------------------------------------- no daemon


@pytest.mark.parametrize("name", ["cron", "skypilot", "dstack"])
def test_the_readme_snippets_never_stop_a_host_without_a_daemon(tmp_path, name):
    calls = run_snippet(readme_snippets()[name], tmp_path / name,
                        f"unix:{tmp_path}/no-daemon.sock")
    check_never_stopped(calls, name)


def test_no_daemon_answers_active_with_the_reason(tmp_path):
    code, answer = idle_json(f"unix:{tmp_path}/no-daemon.sock", "0")
    assert code == 1
    assert answer["active"] is True and answer["basis"] == "fail_safe"
    assert answer["confidence"] == 0 and "no mlcostd at" in answer["reason"]


# ---------------------------------------------------------------------------- the demo host


@pytest.fixture(scope="module")
def demo_daemon(mlcostd) -> livedaemon.LiveDaemon:
    return mlcostd("demo")


@pytest.fixture(scope="module")
def demo_target(demo_daemon) -> str:
    """A demo host whose trainers compute and whose server has been seen serving."""
    daemon = demo_daemon
    target = f"unix:{daemon.socket}"

    def ready() -> bool:
        answer = idle_answer(target, SHORT_FOR)
        kinds = {p["kind"] for p in answer["processes"] if p["active"]}
        return {"training", "online_inference"} <= kinds and any(
            p["serves"] for p in answer["processes"])

    poll(ready, 120, "the demo's trainers and server seen at work", every=1.0,
         explain=daemon.log_tail)
    return target


def test_the_demo_host_is_active_by_its_trainers_and_server(demo_target):
    code, answer = idle_json(demo_target, SHORT_FOR)
    assert code == 1
    assert answer["active"] is True and answer["basis"] == "measured"
    assert answer["reason"].startswith("active now:")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for proc in answer["processes"]:
        by_kind.setdefault(proc["kind"], []).append(proc)
    assert all(p["active"] and p["evidence"] for p in by_kind["training"])
    (server,) = by_kind["online_inference"]
    assert server["serves"] and any("serves on a port" in e for e in server["evidence"])
    # the idle notebook beside them is idle: the evidence is per process
    assert all(not p["active"] for p in by_kind.get("notebook", []))


def test_active_since_holds_still_and_never_before_the_first_tick(demo_daemon, demo_target):
    """The demo's GPUs have been busy since its first tick: active since then, at least, the
    same on every call (probe 141 L5: three calls answered 11:07:18.67, 17.73, 16.32 while the
    first tick was 11:07:22.006, and since_is_history_start was false). GET /v1/history's
    first point is not before the first tick either."""
    reader = StoreReader(str(demo_daemon.db))
    try:
        first_tick = reader.query("SELECT min(ts) AS ts FROM ticks")[0]["ts"] / 1000
    finally:
        reader.close()
    answers = [idle_json(demo_target, SHORT_FOR)[1] for _ in range(3)]
    assert [a["history"]["first_tick"] for a in answers] == [first_tick] * 3
    assert [a["since"] for a in answers] == [first_tick] * 3, answers
    assert all(a["since_is_history_start"] is True for a in answers)
    history = demo_daemon.call("gpu_history", 0, "utilization", 3600, 300)
    assert history.points and history.points[0].ts >= first_tick, (history.points[0],
                                                                   first_tick)


@pytest.mark.parametrize("name", ["cron", "skypilot", "dstack"])
def test_the_readme_snippets_never_stop_the_demo_host(demo_target, tmp_path, name):
    calls = run_snippet(readme_snippets()[name], tmp_path / name, demo_target)
    check_never_stopped(calls, name)


# ---------------------------------------------------------------------------- the edges


def test_the_api_answers_the_client_and_refuses_a_bad_for(shared_daemon):
    from daemon.client import ApiError

    answer = shared_daemon.call("idle", 0.0)
    assert answer["version"] == 1 and isinstance(answer["active"], bool)
    with pytest.raises(ApiError) as refused:
        shared_daemon.call("_request", "GET", "/v1/idle", params={"for": "soon"})
    assert refused.value.status == 400 and "for='soon'" in refused.value.message


def test_a_bad_flag_exits_2_so_and_and_never_fires(tmp_path):
    done = subprocess.run([sys.executable, "-m", "daemon", "idle", "--for", "soon",
                           "--connect", f"unix:{tmp_path}/no-daemon.sock"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--for" in done.stderr and done.stdout == ""
    # a --connect no client can use is the script's mistake: said as one (was: "active", 1)
    for target, said in (("ftp://gpu1:9347", "is neither unix:PATH nor http://HOST:PORT"),
                         ("http://ops:hunter2@gpu1:9347", "has a user or password")):
        done = subprocess.run([sys.executable, "-m", "daemon", "idle", "--connect", target],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr and done.stdout == "", done
        assert "hunter2" not in done.stderr
    # a timeout of 0 said "must be between 0 and 600 seconds"
    done = subprocess.run([sys.executable, "-m", "daemon", "idle", "--timeout", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "--timeout 0 must be more than 0 and at most 600 seconds" in done.stderr
