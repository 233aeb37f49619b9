"""The stack sampler against real py-spy and real processes (CI runs as root)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from simhost import wait_until

from daemon.sources import frames, stacks
from daemon.sources.stacks import (
    DumpResult,
    Frame,
    StackSampler,
    classify_error,
    find_py_spy,
    main_thread,
    parse_dump,
    stack_hash,
    worker_pids,
)

PY_SPY = find_py_spy()
IS_ROOT = os.geteuid() == 0
needs_py_spy = pytest.mark.skipif(PY_SPY is None, reason="py-spy is not installed")
needs_root = pytest.mark.skipif(not IS_ROOT, reason="py-spy needs root to read another process")

PARKED = textwrap.dedent(
    """
    import sys, threading, time

    def parked_in_sleep():
        print("READY", flush=True)  # from inside: a dump never lands in <module>
        time.sleep(60)

    def spinning():
        while True:
            sum(range(1000))

    threading.Thread(target=spinning, name="spinner", daemon=True).start()
    parked_in_sleep()
    """
)


def start_python(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    return proc


@pytest.fixture
def parked():
    proc = start_python(PARKED)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def sleep_process():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


def sampler(**kw) -> StackSampler:
    kw.setdefault("min_interval_s", 0.0)
    kw.setdefault("global_max_per_s", 100.0)
    kw.setdefault("cpu_budget_ratio", 1.0)
    kw.setdefault("timeout_s", 10.0)
    return StackSampler(**kw)


def not_stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.NoSuchProcess:
        return True


def fake_py_spy(tmp_path: Path, body: str) -> str:
    path = tmp_path / "py-spy"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


# -- live dumps ------------------------------------------------------------------------------


@needs_py_spy
@needs_root
def test_live_dump_gives_frames_with_file_and_line(parked):
    def parked_at_the_sleep():
        # READY comes from inside parked_in_sleep(), a line before the sleep: dump until the
        # target has reached it (a fresh sampler each time: no rate limit between tries).
        s = sampler()
        result = asyncio.run(s.dump(parked.pid))
        assert result.status == stacks.OK, result.error
        main = main_thread(result.threads)
        return (s, result, main) if main is not None and main.frames[0].line == 6 else None

    s, result, main = wait_until(parked_at_the_sleep, timeout=10, every=0.1)
    assert result.pid == parked.pid and result.error is None and result.wall_s > 0
    assert main.frames[0].name == "parked_in_sleep"
    assert main.frames[0].filename == "<string>" and main.frames[0].line == 6  # time.sleep(60)
    assert [f.name for f in main.frames][-1] == "<module>"
    names = {t.thread_name for t in result.threads}
    assert "spinner" in names
    assert s.status_by_pid[parked.pid] == stacks.OK
    assert s.dumps_total == 1 and s.cpu_seconds_total >= 0
    assert not_stopped(parked.pid)


@needs_py_spy
@needs_root
def test_never_asks_for_locals_or_native(tmp_path, parked):
    log = tmp_path / "argv"
    fake = fake_py_spy(tmp_path, f'echo "$@" > {log}\nexec {PY_SPY} "$@"')
    result = asyncio.run(sampler(py_spy=fake).dump(parked.pid))
    assert result.status == stacks.OK
    argv = log.read_text().split()
    assert argv[:3] == ["dump", "--json", "--nonblocking"]
    assert "--locals" not in argv and "--native" not in argv


def test_py_spy_missing(parked):
    result = asyncio.run(sampler(py_spy="/nonexistent/py-spy").dump(parked.pid))
    assert result.status == stacks.PY_SPY_MISSING
    assert "/nonexistent/py-spy" in result.error and "pip install py-spy" in result.error


@needs_py_spy
@needs_root
def test_not_python(sleep_process):
    result = asyncio.run(sampler().dump(sleep_process.pid))
    assert result.status == stacks.NOT_PYTHON, result.error
    assert not_stopped(sleep_process.pid)


@needs_py_spy
def test_process_gone():
    proc = subprocess.Popen(["true"])
    proc.wait()
    result = asyncio.run(sampler().dump(proc.pid))
    assert result.status == stacks.PROCESS_GONE
    assert str(proc.pid) in result.error


@needs_py_spy
@needs_root
def test_target_exiting_mid_dump_does_not_raise():
    s = sampler()
    seen = set()
    for delay in (0.0, 0.005, 0.01, 0.02, 0.04):
        proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({0.05 + delay})"])
        time.sleep(0.04)
        result = asyncio.run(s.dump(proc.pid))
        proc.wait()
        seen.add(result.status)
        assert isinstance(result, DumpResult)
        assert result.status in (stacks.OK, stacks.PROCESS_GONE, stacks.NOT_PYTHON, stacks.ERROR)
    assert seen  # whatever py-spy saw, it came back as a status


@needs_py_spy
@pytest.mark.skipif(not IS_ROOT or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run py-spy as nobody")
def test_permission_denied_when_py_spy_runs_unprivileged(tmp_path, parked):
    # The real py-spy, run as 'nobody' against our (root's) process: the kernel refuses.
    tmp_path.chmod(0o755)
    fake = fake_py_spy(
        tmp_path, f'exec setpriv --reuid=65534 --regid=65534 --clear-groups {PY_SPY} "$@"'
    )
    result = asyncio.run(sampler(py_spy=fake).dump(parked.pid))
    assert result.status == stacks.PERMISSION_DENIED, result.error
    assert "CAP_SYS_PTRACE" in result.error and "ptrace_scope" in result.error
    assert not_stopped(parked.pid)


def test_error_texts_of_py_spy_map_to_statuses():
    gone = "Error: Failed to get process executable name. Check that the process is running.\n"
    assert classify_error(gone, os.getpid())[0] == stacks.PROCESS_GONE
    not_py = "Error: Failed to find python version from target process\n\nStack backtrace:\n 0: x"
    status, message = classify_error(not_py, os.getpid())
    assert status == stacks.NOT_PYTHON and "Stack backtrace" not in message
    assert classify_error("Error: Unsupported version of Python: 3.99.0", os.getpid())[0] == (
        stacks.UNSUPPORTED_PYTHON)
    denied = "Permission Denied: Try running again with elevated permissions by going 'sudo env'"
    assert classify_error(denied, os.getpid())[0] == stacks.PERMISSION_DENIED
    assert classify_error("Error: something new", os.getpid())[0] == stacks.ERROR


# -- limits ----------------------------------------------------------------------------------


@needs_py_spy
@needs_root
def test_rate_limited_per_process(parked):
    s = sampler(min_interval_s=30.0)

    async def twice():
        return await s.dump(parked.pid), await s.dump(parked.pid)

    first, second = asyncio.run(twice())
    assert first.status == stacks.OK
    assert second.status == stacks.RATE_LIMITED and "min_interval_s" in second.error
    assert s.status_by_pid[parked.pid] == stacks.OK  # rate_limited is not a target's status
    assert s.dumps_total == 1


@needs_py_spy
@needs_root
def test_rate_limited_globally(parked, sleep_process):
    s = sampler(global_max_per_s=0.1, global_burst=1)

    async def two_pids():
        return await s.dump(parked.pid), await s.dump(sleep_process.pid)

    first, second = asyncio.run(two_pids())
    assert first.status == stacks.OK
    assert second.status == stacks.RATE_LIMITED and "global" in second.error


@needs_py_spy
@needs_root
def test_over_budget_after_spending_it(parked, sleep_process):
    s = sampler(cpu_budget_ratio=1e-9)

    async def two():
        return await s.dump(parked.pid), await s.dump(sleep_process.pid)

    first, second = asyncio.run(two())
    assert first.status == stacks.OK
    assert second.status == stacks.OVER_BUDGET and "cpu_budget_ratio" in second.error


@needs_py_spy
@needs_root
def test_one_py_spy_at_a_time(tmp_path, parked):
    log = tmp_path / "spans"
    fake = fake_py_spy(
        tmp_path,
        f'echo "start $(date +%s.%N)" >> {log}\nsleep 0.2\n{PY_SPY} "$@"\nrc=$?\n'
        f'echo "end $(date +%s.%N)" >> {log}\nexit $rc',
    )
    s = sampler(py_spy=fake)
    targets = [start_python(PARKED) for _ in range(2)]
    try:
        async def together():
            return await asyncio.gather(*(s.dump(p.pid) for p in [parked, *targets]))

        results = asyncio.run(together())
    finally:
        for p in targets:
            p.kill()
            p.wait()
    assert [r.status for r in results] == [stacks.OK] * 3
    events = [line.split() for line in log.read_text().splitlines()]
    kinds = [kind for kind, _ in events]
    assert kinds == ["start", "end"] * 3  # never two starts in a row: no overlap


@needs_py_spy
@needs_root
def test_timeout_kills_py_spy_not_the_target(tmp_path, parked):
    pidfile = tmp_path / "pid"
    fake = fake_py_spy(tmp_path, f"echo $$ > {pidfile}\nexec sleep 30")
    s = sampler(py_spy=fake, timeout_s=0.3)
    result = asyncio.run(s.dump(parked.pid))  # the fake would run 30 s: TIMEOUT says it was cut
    assert result.status == stacks.TIMEOUT and "0.3" in result.error
    fake_pid = int(pidfile.read_text())
    assert not psutil.pid_exists(fake_pid) or psutil.Process(fake_pid).status() == psutil.STATUS_ZOMBIE
    assert parked.poll() is None and not_stopped(parked.pid)


def stuck_py_spy(tmp_path: Path, target: int, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[str, list[int]]:
    """A py-spy that, asked to dump `target`, does not end when killed, as one in
    uninterruptible sleep (a lookup on a user's hung FUSE mount): SIGKILL stays pending, as
    the kernel leaves it pending on a process in D state, until the test delivers it (the file
    system coming back). Other dumps run the real py-spy. Returns its path and, once killed,
    the stuck process's pid."""
    fake_pid, started = tmp_path / "fake.pid", tmp_path / "started"
    fake = fake_py_spy(tmp_path, f'echo "$@" >> {started}\n'
                                 f'case "$*" in *"--pid {target}"*) '
                                 f'echo $$ > {fake_pid}; exec sleep 300;; esac\n'
                                 f'exec {PY_SPY} "$@"')
    stuck: list[int] = []
    real_kill = asyncio.subprocess.Process.kill

    def kill(proc: asyncio.subprocess.Process) -> None:
        if fake_pid.exists() and proc.pid == int(fake_pid.read_text()):
            stuck.append(proc.pid)  # pending
        else:
            real_kill(proc)

    monkeypatch.setattr(asyncio.subprocess.Process, "kill", kill)
    return fake, stuck


async def _until_ended(s: StackSampler) -> None:
    deadline = time.monotonic() + 60
    while s.unfinished and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


@needs_py_spy
@needs_root
def test_a_py_spy_that_does_not_end_when_killed_stops_only_its_own_process(
        tmp_path, parked, sleep_process, monkeypatch):
    """Probe 110: a py-spy in uninterruptible sleep does not end when killed, and the sampler
    waited for it holding its one-at-a-time lock: no process on the host had a stack sampled
    again, and nothing said so. It is left to end in the background now: its process is not
    dumped again meanwhile, the others are, and `problem` says why; with MAX_UNFINISHED left,
    no process is dumped."""
    fake, stuck_pids = stuck_py_spy(tmp_path, parked.pid, monkeypatch)
    s = sampler(py_spy=fake, timeout_s=0.3)

    async def main() -> None:
        stuck = await s.dump(parked.pid)
        assert stuck.status == stacks.TIMEOUT, stuck
        assert stuck_pids and s.unfinished == {stuck_pids[0]: parked.pid}
        assert s.problem is not None and f"({parked.pid})" in s.problem
        again = await s.dump(parked.pid)  # not started again while its py-spy has not ended
        assert again.status == stacks.TIMEOUT and again.error == s.problem
        assert (tmp_path / "started").read_text().count(f"--pid {parked.pid}") == 1
        other = await s.dump(sleep_process.pid)  # the lock is free: the others are dumped
        assert other.status == stacks.NOT_PYTHON, other
        monkeypatch.setattr(stacks, "MAX_UNFINISHED", 1)
        none = await s.dump(sleep_process.pid)
        assert none.status == stacks.TIMEOUT and "no stack is sampled" in (none.error or "")
        os.kill(stuck_pids[0], signal.SIGKILL)  # the file system answers: it ends
        await _until_ended(s)
        assert not s.unfinished and s.problem is None
        after = await s.dump(sleep_process.pid)
        assert after.status == stacks.NOT_PYTHON, after

    asyncio.run(main())
    assert parked.poll() is None and not_stopped(parked.pid)


@needs_py_spy
@needs_root
def test_health_says_while_a_py_spy_has_not_ended(tmp_path, parked, monkeypatch):
    """/v1/health's problems name the stuck py-spy's process (it said `"problems": []` while
    no stack was sampled), and stop naming it once it has ended."""
    import aiohttp

    from daemon import config as config_module
    from daemon.api.server import ApiServer
    from daemon.runtime.attribution import Attribution
    from daemon.runtime.daemon import Daemon
    from daemon.store.writer import Store

    fake, stuck_pids = stuck_py_spy(tmp_path, parked.pid, monkeypatch)
    config = config_module.from_dict({"daemon": {"db": str(tmp_path / "mlcost.db")}},
                                     where="test")
    daemon = Daemon(config)
    daemon.store = Store(str(daemon.db))
    s = sampler(py_spy=fake, timeout_s=0.3)
    daemon.attribution = Attribution(config.attribution, daemon.store, s, interval_s=1.0)
    socket_path = tmp_path / "run" / "mlcostd.sock"

    async def problems() -> list[str]:
        connector = aiohttp.UnixConnector(path=str(socket_path))
        async with aiohttp.ClientSession(connector=connector) as session, \
                session.get("http://x/v1/health") as response:
            return list((await response.json())["problems"])

    async def main() -> None:
        server = ApiServer(daemon, socket_path)
        await server.start()
        try:
            assert await problems() == []
            assert (await s.dump(parked.pid)).status == stacks.TIMEOUT
            said = await problems()
            assert len(said) == 1 and said[0].startswith("stack sampling: 1 py-spy run(s) "
                                                         "did not end when killed"), said
            assert f"({parked.pid})" in said[0]
            os.kill(stuck_pids[0], signal.SIGKILL)
            await _until_ended(s)
            assert await problems() == []
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    finally:
        daemon.store.close()


# -- pure helpers ----------------------------------------------------------------------------


def test_stack_hash_is_stable_and_line_sensitive():
    a = (Frame("f", "/x/a.py", 3), Frame("<module>", "/x/a.py", 9))
    assert stack_hash(a) == stack_hash(list(a))
    assert len(stack_hash(a)) == 32 and int(stack_hash(a), 16) >= 0
    assert stack_hash(a) != stack_hash((Frame("f", "/x/a.py", 4), a[1]))


def test_parse_dump_reads_py_spy_json_and_picks_main_thread():
    text = (Path(__file__).parent / "fixtures" / "pyspy" / "loader_starved.json").read_text()
    threads = parse_dump(text)
    main = main_thread(threads)
    assert main is not None and main.thread_name == "MainThread"
    assert main.frames[0].name == "_PollLikeSelector.select"
    assert main.frames[0].filename.endswith("selectors.py") and main.frames[0].line > 0
    with pytest.raises(ValueError):
        parse_dump('{"not": "a list"}')


def test_parse_dump_keeps_the_main_thread_and_64_others_each_to_its_innermost_256_frames():
    """What the analysis reads of a dump and no more (probe 146 H2: a process's 60 threads 500
    frames deep were all parsed and redacted): the main thread wherever py-spy lists it."""
    def thread(i: int, name: str) -> dict:
        return {"pid": 7, "thread_id": i, "os_thread_id": 100 + i, "thread_name": name,
                "active": False,
                "frames": [{"name": f"f{depth}", "filename": "/x/a.py", "line": depth + 1}
                           for depth in range(300)]}

    data = [thread(i, f"worker-{i}") for i in range(100)]
    data[90] = thread(90, "MainThread")
    threads = parse_dump(json.dumps(data))
    assert len(threads) == 65
    assert frames.MAX_THREADS_KEPT == 65
    main = main_thread(threads)
    assert main is not None and main.thread_id == 90
    assert [t.thread_id for t in threads if t is not main] == list(range(64))
    assert all(len(t.frames) == frames.MAX_FRAMES_KEPT == 256 for t in threads)
    assert main.frames[0] == Frame("f0", "/x/a.py", 1)  # the innermost kept
    # fewer than the caps: all kept, in py-spy's order
    few = parse_dump(json.dumps(data[:3]))
    assert [t.thread_id for t in few] == [0, 1, 2]


# A py-spy whose dump of the threads of a process (one with very long names and deep stacks)
# is 16 MiB of valid JSON, which it writes and then leaves a mark that it finished.
_HUGE_DUMP = """
import json, sys
frame = json.dumps({{"name": "f" * 1000, "filename": "/tmp/" + "d" * 1000 + ".py", "line": 1}})
out = sys.stdout
out.write('[{{"pid": {pid}, "thread_id": 1, "thread_name": "MainThread", "active": false, '
          '"frames": [' + frame)
for _ in range(8000):
    out.write("," + frame)
out.write("]}}]")
out.flush()
open({done!r}, "w").write("done")
"""


def test_a_py_spy_output_over_max_dump_bytes_is_not_read_and_py_spy_is_killed(tmp_path):
    """probe 146 H2: py-spy's whole stdout was read and parsed on the loop (97 MB, 6-8 s of a
    stalled loop per dump). Past max_output_bytes it is killed before it can write the rest,
    and the dump's status says why."""
    done, pidfile = tmp_path / "done", tmp_path / "pid"
    program = tmp_path / "huge.py"
    program.write_text(_HUGE_DUMP.format(pid=os.getpid(), done=str(done)))
    fake = fake_py_spy(tmp_path, f"echo $$ > {pidfile}\nexec {sys.executable} {program}")
    s = sampler(py_spy=fake, timeout_s=60.0)
    result = asyncio.run(s.dump(os.getpid()))
    assert result.status == "output_too_large", result
    assert stacks.OUTPUT_TOO_LARGE == "output_too_large"
    assert result.threads == [] and str(frames.MAX_DUMP_BYTES) in (result.error or "")
    assert not done.exists()  # killed while it wrote (our reading stopped at the limit)
    fake_pid = int(pidfile.read_text())
    assert not psutil.pid_exists(fake_pid) or \
        psutil.Process(fake_pid).status() == psutil.STATUS_ZOMBIE
    assert s.unfinished == {}
    # under the limit the same dump is read: a limit raised past it gives its frames
    done.unlink(missing_ok=True)
    whole = asyncio.run(sampler(py_spy=fake, timeout_s=60.0,
                                max_output_bytes=64 << 20).dump(os.getpid()))
    assert whole.status == stacks.OK, whole.error
    assert len(whole.threads[0].frames) == frames.MAX_FRAMES_KEPT and done.exists()


def test_a_dump_is_parsed_off_the_loop(tmp_path, monkeypatch):
    """Its names redacted in a worker thread, not the daemon's loop (probe 146 H2: up to
    MAX_DUMP_BYTES of long names take ~0.25 s to redact)."""
    text = (Path(__file__).parent / "fixtures" / "pyspy" / "loader_starved.json").read_text()
    dump_file = tmp_path / "dump.json"
    dump_file.write_text(text)
    fake = fake_py_spy(tmp_path, f"cat {dump_file}")
    parsed_in: list[int] = []
    real_parse = stacks.parse_dump

    def recorded(output: str):
        parsed_in.append(threading.get_ident())
        return real_parse(output)

    monkeypatch.setattr(stacks, "parse_dump", recorded)

    async def run() -> tuple[DumpResult, int]:
        return await sampler(py_spy=fake).dump(os.getpid()), threading.get_ident()

    result, loop_thread = asyncio.run(run())
    assert result.status == stacks.OK and main_thread(result.threads) is not None
    assert parsed_in and loop_thread not in parsed_in


@needs_py_spy
@needs_root
def test_worker_pids_finds_multiprocessing_children():
    code = textwrap.dedent(
        """
        import multiprocessing as mp, time
        def work():
            time.sleep(60)
        if __name__ == "__main__":
            ps = [mp.get_context("fork").Process(target=work) for _ in range(2)]
            for p in ps: p.start()
            print("READY", flush=True)
            time.sleep(60)
        """
    )
    proc = start_python(code)
    try:
        deadline = time.monotonic() + 5
        found: list[int] = []
        while time.monotonic() < deadline and len(found) < 2:
            found = worker_pids(proc.pid)
            time.sleep(0.05)
        assert found == sorted(c.pid for c in psutil.Process(proc.pid).children())
        assert len(found) == 2
        result = asyncio.run(sampler().dump(found[0]))
        assert result.status == stacks.OK
        assert main_thread(result.threads).frames[0].name == "work"
    finally:
        for child in psutil.Process(proc.pid).children():
            child.kill()
        proc.kill()
        proc.wait()
    assert worker_pids(proc.pid) == []


def test_the_stack_types_load_neither_psutil_nor_subprocess():
    """Analysis and `mlcost-top --replay` use Frame and friends without the sampler's imports."""
    code = ("import sys, daemon.sources.frames\n"
            "print(sorted(m for m in ('psutil', 'subprocess', 'asyncio') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=30, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert stacks.Frame is frames.Frame and stacks.parse_dump is frames.parse_dump  # re-exported
