"""The process source against real processes: counters, children, exits and pid reuse."""

import os
import shutil
import subprocess
import sys
import threading
import time

import psutil
import pytest
from simhost import poll, run_concurrently

from daemon.analysis.host_signals import ON_CPU_MIN, cpu_demand
from daemon.sources import procs as procs_module
from daemon.sources.procs import (
    MainThreadClock,
    PressureReader,
    ProcessSource,
    ThreadTimes,
    read_pressure,
)
from daemon.sources.sample import GpuUse

USE = (GpuUse(gpu_index=0, memory_bytes=1 << 30, sm_share=50.0),)


def spawn(code):
    return subprocess.Popen([sys.executable, "-c", code])


def test_counters_of_a_real_process(tmp_path):
    target = tmp_path / "out.bin"
    code = (
        "import os, time\n"
        "while time.process_time() < 0.6: pass\n"  # burn 0.6 s of CPU, however loaded the host
        f"with open({str(target)!r}, 'wb') as f:\n"
        "    f.write(os.urandom(4 << 20)); f.flush(); os.fsync(f.fileno())\n"
        "time.sleep(30)\n"
    )
    proc = spawn(code)
    try:
        source = ProcessSource()
        source.discover({proc.pid})

        def written() -> object:
            (read,) = source.read({proc.pid: USE})
            return read if read.write_bytes and read.write_bytes >= 4 << 20 else None

        # (it burns 0.6 s of CPU first: CI's loaded machine took over the 10 s it was given)
        sample = poll(written, 120, "the process's 4 MiB write in /proc/PID/io")
        assert sample.pid == proc.pid
        assert abs(sample.start_time - psutil.Process(proc.pid).create_time()) < 0.01
        assert sample.user == psutil.Process(proc.pid).username()
        assert "time.sleep(30)" in sample.command
        assert sample.cpu_seconds >= 0.4
        assert sample.write_bytes >= 4 << 20
        assert sample.rss_bytes > 1 << 20
        assert sample.gpus == USE
        assert sample.threads >= 1
    finally:
        proc.kill()
        proc.wait()


def test_a_carriage_return_in_an_argument_is_kept_as_one():
    """psutil reads /proc/PID/cmdline as text: `line2\\rCR` was recorded as `line2\\nCR`."""
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "line2\rCR", "two words",
            "\udcff"]  # (a byte that is not UTF-8)
    proc = subprocess.Popen(argv)
    try:
        # Until the child has exec'd, its /proc cmdline is still the parent's (or empty).
        poll(lambda: procs_module.read_argv(proc.pid) == argv, 10, "the child's argv in /proc")
        source = ProcessSource()
        source.discover({proc.pid})
        (sample,) = source.read({proc.pid: USE})
        assert sample.command.endswith("time.sleep(30) line2\\rCR two words \\xff"), \
            sample.command
        assert procs_module.read_argv(proc.pid)[-3:] == ["line2\rCR", "two words", "\udcff"]
    finally:
        proc.kill()
        proc.wait()


def test_a_command_line_read_mid_exec_is_read_again(monkeypatch):
    """The kernel shows a child's command line empty for a moment as it execs, and its name can
    stay the same (python started by python): a CI run recorded such a child as `[python]` for
    good."""
    proc = spawn("import time; time.sleep(30)")
    try:
        poll(lambda: "time.sleep(30)" in " ".join(procs_module.read_argv(proc.pid)), 10,
             "the child's argv in /proc")
        real, calls = procs_module.read_argv, []

        def mid_exec(pid):
            calls.append(pid)
            return [] if len(calls) == 1 else real(pid)  # discovery's read: mid-exec

        monkeypatch.setattr(procs_module, "read_argv", mid_exec)
        source = ProcessSource()
        source.discover({proc.pid})
        (sample,) = source.read({proc.pid: USE})
        assert "time.sleep(30)" in sample.command, sample.command
        assert len(calls) == 2
    finally:
        proc.kill()
        proc.wait()


def test_a_child_found_before_its_exec_gets_its_own_command_line():
    """Between fork and exec a child's command line is its parent's, and python starting python
    keeps the name "python": a child discovered then was recorded with its parent's command
    line for good (a spawned DataLoader worker read as the training script)."""
    code = (
        "import os, sys, time\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.read(r, 1)\n"  # the test's word to exec
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)',"
        " 'the-worker'])\n"
        "print(pid, flush=True)\n"
        "sys.stdin.readline()\n"
        "os.write(w, b'x')\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, "the-parent"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        source = ProcessSource()
        source.discover({child})
        assert "the-parent" in source._known[child].command  # (what discovery could read)
        parent.stdin.write("exec\n")
        parent.stdin.flush()
        poll(lambda: "the-worker" in procs_module.read_argv(child), 10, "the child's exec")
        (sample,) = source.read({child: USE})
        assert sample.command.endswith("time.sleep(30) the-worker"), sample.command
    finally:
        parent.kill()
        parent.wait()
        try:
            os.kill(child, 9)
        except (ProcessLookupError, UnboundLocalError):
            pass


def test_a_process_without_a_command_line_keeps_its_name_and_is_not_read_again(monkeypatch):
    """One whose command line stays empty (a kernel thread; one root may not read under some
    LSMs) keeps its [name] after one more look, and the tick's "nothing moved" path."""
    proc = spawn("import time; time.sleep(30)")
    try:
        poll(lambda: "time.sleep(30)" in " ".join(procs_module.read_argv(proc.pid)), 10,
             "the child's argv in /proc")
        calls = []
        monkeypatch.setattr(procs_module, "read_argv", lambda pid: calls.append(pid) or [])
        source = ProcessSource()
        source.discover({proc.pid})
        reads = [source.read({proc.pid: USE}) for _ in range(3)]
        assert [s.command for (s,) in reads] == [f"[{psutil.Process(proc.pid).name()}]"] * 3
        assert len(calls) == 2  # discovery, then the first tick's look: no more
        last = []

        def same_sample() -> bool:  # once it sleeps, nothing moves: the tick's same sample
            (sample,) = source.read({proc.pid: USE})
            last.append(sample)
            return len(last) > 1 and last[-1] is last[-2]

        poll(same_sample, 10, "a read that finds nothing moved")
        assert len(calls) == 2
    finally:
        proc.kill()
        proc.wait()


def test_pipe_traffic_counts_as_read_and_written_chars():
    # Pipes and sockets never reach the storage layer: rchar/wchar are what show them.
    code = (
        "import os, sys, time\n"
        "r, w = os.pipe()\n"
        "for _ in range(64):\n"
        "    os.write(w, b'x' * 65536); os.read(r, 65536)\n"
        "print('READY', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        source = ProcessSource()
        source.discover({proc.pid})
        (sample,) = source.read({proc.pid: USE})
        assert sample.read_chars >= 64 * 65536
        assert sample.write_chars >= 64 * 65536
        assert sample.read_bytes < 1 << 20  # nothing came from a disk
    finally:
        proc.kill()
        proc.wait()


def test_main_thread_clock_sees_the_main_thread_not_its_helpers():
    # A helper thread spins while the main thread sleeps: the process burns CPU, its main
    # thread does not (what a blocked main thread beside a busy loader thread looks like).
    code = (
        "import threading, time\n"
        "def spin():\n"
        "    while True: pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "print('READY', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    clock = MainThreadClock()
    try:
        assert proc.stdout.readline().strip() == "READY"
        start = psutil.Process(proc.pid).create_time()
        first = clock.times(proc.pid, start)
        assert first is not None
        process = psutil.Process(proc.pid)
        burnt = process.cpu_times()
        deadline = time.monotonic() + 60  # a bound, not a speed: a loaded CI host is slow
        while sum(process.cpu_times()[:2]) - sum(burnt[:2]) < 0.5:
            assert time.monotonic() < deadline, "the helper thread never ran"
            time.sleep(0.05)
        main = clock.times(proc.pid, start)
        assert main is not None and main.on_cpu - first.on_cpu < 0.1
    finally:
        proc.kill()
        proc.wait()
    assert clock.times(proc.pid, start) is None  # gone: no error, and its descriptor closed
    clock.close()


def test_main_thread_clock_reads_a_spinning_thread_as_busy_even_when_it_waits_for_a_core():
    # run / (run + sleep), the queue left out (schedstat): a CPU-bound thread reads as busy
    # however loaded the host.
    code = "print('READY', flush=True)\nwhile True: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    clock = MainThreadClock()
    try:
        assert proc.stdout.readline().strip() == "READY"
        start = psutil.Process(proc.pid).create_time()
        first, since = clock.times(proc.pid, start), time.monotonic()
        deadline = since + 20
        # (the kernel adds a wait to the queue time when the wait ends: a thread queued at
        # the read reads low by that wait, which a longer span makes small)
        while time.monotonic() - since < 2.0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        last, wall = clock.times(proc.pid, start), time.monotonic() - since
        share = cpu_demand(last.on_cpu - first.on_cpu, last.queued - first.queued, wall)
        assert share >= ON_CPU_MIN, (first, last, wall)
    finally:
        proc.kill()
        proc.wait()
        clock.close()


def write_schedstat(root, pid, on_cpu_ns, queued_ns):
    task = root / str(pid) / "task" / str(pid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "schedstat").write_text(f"{on_cpu_ns} {queued_ns} 1234\n")


def test_a_thread_waiting_for_a_core_is_not_counted_as_running(tmp_path):
    # Recorded at load ~31 on 2 cores (finetune_with_loader's main thread, bench/
    # attribution_accuracy.py): over 3 s it ran 3.2% of the wall time and waited on a run
    # queue 68.1%. Counting the wait as running read 71% busy: host_preprocess.
    clock = MainThreadClock(proc=str(tmp_path))
    write_schedstat(tmp_path, 4242, 10_000_000_000, 50_000_000_000)
    first = clock.times(4242, 1.0)
    write_schedstat(tmp_path, 4242, 10_000_000_000 + 96_000_000, 50_000_000_000 + 2_043_000_000)
    last = clock.times(4242, 1.0)
    clock.close()
    assert first == ThreadTimes(10.0, 50.0, 1234)
    share = cpu_demand(last.on_cpu - first.on_cpu, last.queued - first.queued, 3.0)
    assert share == pytest.approx(0.096 / (3.0 - 2.043))
    assert share < ON_CPU_MIN



def test_children_are_found_and_read():
    code = (
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']) "
        "for _ in range(2)]\n"
        "time.sleep(30)\n"
    )
    proc = spawn(code)
    try:
        source = ProcessSource(children=True)
        deadline = time.time() + 10
        while time.time() < deadline:
            source.discover({proc.pid})
            samples = source.read({proc.pid: USE})
            if len(samples) == 3:
                break
            time.sleep(0.2)
        by_pid = {s.pid: s for s in samples}
        assert len(by_pid) == 3
        kids = [s for s in samples if s.pid != proc.pid]
        assert all(k.ppid == proc.pid and k.gpus == () for k in kids)
        assert ProcessSource(children=False).read({proc.pid: USE}) == ()  # nothing discovered
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def test_a_process_with_more_children_than_watched_has_only_the_cap_read():
    """A user's GPU process that forks hundreds of children (a probe forked 1500) made the
    daemon open two descriptors and read two files a tick for each: at most
    MAX_CHILDREN_WATCHED of one process's children are watched."""
    from daemon.sources.procs import MAX_CHILDREN_WATCHED

    count = MAX_CHILDREN_WATCHED + 12
    code = (
        "import os, signal, sys, time\n"
        f"for _ in range({count}):\n"
        "    if os.fork() == 0:\n"
        "        signal.pause()\n"
        "        os._exit(0)\n"
        "print('forked', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "forked\n"
        assert len(psutil.Process(proc.pid).children()) == count
        source = ProcessSource(children=True)
        source.discover({proc.pid})
        samples = source.read({proc.pid: USE})
        kids = [s for s in samples if s.pid != proc.pid]
        assert len(kids) == MAX_CHILDREN_WATCHED
        assert all(k.ppid == proc.pid for k in kids)
        source.close()
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def test_hundreds_of_short_lived_processes_exiting_mid_read():
    source = ProcessSource(children=True)
    live = []
    seen = 0
    started = 0
    deadline = time.time() + 20
    while started < 300 and time.time() < deadline:
        for _ in range(20):
            live.append(subprocess.Popen(["sleep", f"0.0{started % 9 + 1}"]))
            started += 1
        pids = {p.pid for p in live}
        uses = {pid: USE for pid in pids}
        source.discover(pids)
        for _ in range(3):
            for sample in source.read(uses):
                assert sample.pid in pids
                seen += 1
        for p in [p for p in live if p.poll() is not None]:
            live.remove(p)
    for p in live:
        p.wait()
    assert started >= 300
    assert seen > 0  # some were read alive; the rest exited between discovery and read


def _spawn_with_pid(pid, code, attempts=50):
    """Start a process that gets exactly `pid` (root: /proc/sys/kernel/ns_last_pid)."""
    for _ in range(attempts):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = spawn(code)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.fail(f"could not start a process with pid {pid} (others forked in between)")


@pytest.mark.skipif(os.geteuid() != 0, reason="reusing a pid on purpose needs root")
def test_reused_pid_is_told_apart_by_start_time():
    first = spawn("import time; time.sleep(30)")
    source = ProcessSource()
    source.discover({first.pid})
    (before,) = source.read({first.pid: USE})
    first.kill()
    first.wait()
    time.sleep(0.02)  # a different start time, in clock ticks
    second = _spawn_with_pid(first.pid, "import time; time.sleep(30)")
    try:
        # The old identity is never reported for the new process...
        assert source.read({second.pid: USE}) == ()
        # ...and discovery learns the new one under its own start time.
        source.discover({second.pid})
        (after,) = source.read({second.pid: USE})
        assert after.pid == before.pid
        assert after.start_time > before.start_time
        assert after.key != before.key
    finally:
        second.kill()
        second.wait()


def test_exited_process_disappears_without_error():
    proc = spawn("import time; time.sleep(30)")
    source = ProcessSource()
    source.discover({proc.pid})
    assert len(source.read({proc.pid: USE})) == 1
    proc.kill()
    proc.wait()
    assert source.read({proc.pid: USE}) == ()
    source.discover({proc.pid})
    assert source.read({proc.pid: USE}) == ()


def test_stalls_of_a_one_thread_process_come_from_its_stat_and_others_walk_their_threads(
        monkeypatch):
    walked = []
    walk = procs_module._task_stalls

    def recorded(pid):
        walked.append(pid)
        return walk(pid)

    monkeypatch.setattr(procs_module, "_task_stalls", recorded)
    single = subprocess.Popen(["sleep", "60"])
    threaded = subprocess.Popen(
        [sys.executable, "-c", "import threading, time\n"
         "threading.Thread(target=time.sleep, args=(60,)).start()\n"
         "print('up', flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert threaded.stdout.readline() == "up\n"
        source = ProcessSource(children=False)
        source.discover({single.pid, threaded.pid})
        # (a first read counts as I/O: nothing was counted before it)
        read = {s.pid: s for s in source.read({single.pid: USE, threaded.pid: USE})}
        assert read[single.pid].threads == 1 and read[single.pid].threads_in_d == 0
        assert read[threaded.pid].threads == 2
        assert walked == [threaded.pid]  # a loader thread may be the one waiting: walked
    finally:
        for proc in (single, threaded):
            proc.kill()
            proc.wait()
        threaded.stdout.close()


TWO_THOUSAND_THREADS = (
    "import threading\n"
    "threading.stack_size(64 << 10)\n"
    "done = threading.Event()\n"
    "for _ in range(2000): threading.Thread(target=done.wait, daemon=True).start()\n"
    "print('up', flush=True)\n"
    "done.wait(120)\n")


def test_a_process_with_thousands_of_threads_has_at_most_max_threads_read_walked_main_first(
        monkeypatch):
    """probe 146 M1: a GPU process that does a little I/O had every one of its threads' stat
    read on the loop each tick (0.45 s a tick at 20,000 threads). The walk reads the main
    thread first, then others, MAX_THREADS_READ in all, as read_facts does."""
    from daemon.sources.proc_state import MAX_THREADS_READ
    many = subprocess.Popen([sys.executable, "-c", TWO_THOUSAND_THREADS], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert many.stdout.readline() == "up\n"
        assert psutil.Process(many.pid).num_threads() > 4 * MAX_THREADS_READ
        read_paths = []
        real_read = procs_module._read

        def recorded(path):
            read_paths.append(path)
            return real_read(path)

        monkeypatch.setattr(procs_module, "_read", recorded)
        source = ProcessSource(children=False)
        source.discover({many.pid})
        # (a first read counts as I/O: nothing was counted before it, so its threads are walked)
        (sample,) = source.read({many.pid: USE})
        assert sample.threads > 4 * MAX_THREADS_READ
        walked = [path for path in read_paths if "/task/" in path]
        assert walked[0] == f"/proc/{many.pid}/task/{many.pid}/stat"  # the main thread first
        assert len(walked) == MAX_THREADS_READ
        assert len(set(walked)) == len(walked)
    finally:
        many.kill()
        many.wait()
        many.stdout.close()


def test_pressure_parsed_from_proc_format(tmp_path):
    (tmp_path / "io").write_text(
        "some avg10=1.50 avg60=0.80 avg300=0.20 total=123456\n"
        "full avg10=0.75 avg60=0.40 avg300=0.10 total=65432\n")
    (tmp_path / "cpu").write_text(
        "some avg10=12.00 avg60=5.00 avg300=1.00 total=999\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    pressure = read_pressure(str(tmp_path))
    assert pressure.io_some_avg10 == 1.5
    assert pressure.io_full_total_us == 65432
    assert pressure.cpu_some_avg10 == 12.0
    assert pressure.cpu_some_total_us == 999


def test_a_kept_pressure_reader_reads_each_tick_what_the_files_say_now(tmp_path):
    (tmp_path / "cpu").write_text("some avg10=1.00 avg60=0.00 avg300=0.00 total=10\n")
    reader = PressureReader(str(tmp_path))
    try:
        assert reader.read().io_some_total_us is None  # no io file yet: unknown
        (tmp_path / "io").write_text("some avg10=2.00 avg60=0.00 avg300=0.00 total=20\n")
        (tmp_path / "cpu").write_text("some avg10=3.50 avg60=0.00 avg300=0.00 total=30\n")
        pressure = reader.read()
    finally:
        reader.close()
    assert (pressure.io_some_total_us, pressure.cpu_some_avg10) == (20, 3.5)
    assert pressure == read_pressure(str(tmp_path))


def test_pressure_absent_is_none(tmp_path):
    pressure = read_pressure(str(tmp_path / "missing"))
    assert pressure.io_some_avg10 is None and pressure.cpu_some_total_us is None


def test_real_host_pressure():
    assert os.path.exists("/proc/pressure/io"), "this host kind has PSI; CI runs on it"
    assert read_pressure().io_some_total_us is not None


def _decoy_stat(path):
    """A file in /proc/PID/stat's format that no real process has: 777 threads."""
    fields = ["S", "1"] + ["0"] * 43
    fields[17] = "777"  # field 20: num_threads
    path.write_text("1 (decoy) " + " ".join(fields) + "\n")
    return str(path)


def test_discovery_closing_descriptors_never_lets_the_tick_read_another_file(tmp_path):
    """Discovery (a thread) forgets and relearns processes while the tick reads them and a
    third thread keeps opening a decoy file, so closed descriptor numbers are reused at once.
    Before the fix, the tick could pread a number that now belongs to the decoy."""
    decoy = _decoy_stat(tmp_path / "stat")
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(16)]
    pids = {p.pid for p in procs}
    half = set(sorted(pids)[::2])
    uses = {pid: USE for pid in pids}
    source = ProcessSource(children=False)
    source.discover(pids)
    stop = threading.Event()
    wrong: list[object] = []
    reads = [0]

    def discover():
        while not stop.is_set():
            source.discover(half)
            source.discover(pids)

    def open_decoys():
        while not stop.is_set():
            fds = [os.open(decoy, os.O_RDONLY) for _ in range(8)]
            for fd in fds:
                os.close(fd)

    def tick():
        while not stop.is_set():
            for sample in source.read(uses):
                reads[0] += 1
                if sample.threads != 1 or sample.pid not in pids:
                    wrong.append(sample)

    try:
        run_concurrently([discover, open_decoys, tick], stop, 4.0, wrong)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        source.close()
    assert not wrong, f"the tick read another file through a reused descriptor: {wrong[0]}"
    assert reads[0] > 0


def test_a_zombie_is_a_gone_process():
    proc = spawn("import time; time.sleep(30)")
    try:
        source = ProcessSource()
        source.discover({proc.pid})
        assert len(source.read({proc.pid: USE})) == 1
        proc.kill()  # it exits; we do not reap it yet: a zombie holding its pid
        deadline = time.time() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.time() < deadline, "the child did not become a zombie"
            time.sleep(0.02)
        assert source.read({proc.pid: USE}) == ()  # not shown as <defunct> with its GPU
    finally:
        proc.kill()
        proc.wait()


def test_discovery_takes_the_ticks_read_as_proof_a_process_still_runs(monkeypatch):
    """A process the tick read since the last round is not read again by discovery; one whose
    last read failed (it exited, its pid may be reused) is looked at again."""
    proc = spawn("import time; time.sleep(30)")
    try:
        source = ProcessSource(children=False)
        source.discover({proc.pid})
        assert len(source.read({proc.pid: USE})) == 1
        rereads = []
        real = procs_module._reread
        monkeypatch.setattr(procs_module, "_reread",
                            lambda fd: rereads.append(fd) or real(fd))
        source.discover({proc.pid})
        assert rereads == []  # the tick's read answered
        source.discover({proc.pid})
        assert len(rereads) == 1  # no tick read since: one pread of its own
    finally:
        proc.kill()
        proc.wait()
    assert source.read({proc.pid: USE}) == ()
    source.discover(set())
    assert source.read({proc.pid: USE}) == ()


def test_an_idle_process_is_read_again_as_soon_as_it_moves():
    """A process whose /proc files read the same bytes gets the same sample again; the tick
    after it moves (pipe traffic, another GPU share) shows the new counters."""
    code = (
        "import os, sys\n"
        "print('READY', flush=True)\n"  # started: no more reads or CPU until told
        "for line in sys.stdin:\n"  # idle until told; then 1 MiB through a pipe of its own
        "    r, w = os.pipe()\n"
        "    for _ in range(16):\n"
        "        os.write(w, b'x' * 65536); os.read(r, 65536)\n"
        "    print('DONE', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        # until then Python is still starting: reading its modules moves read_chars
        assert proc.stdout.readline().strip() == "READY"
        source = ProcessSource()
        source.discover({proc.pid})
        # after READY it still runs on to its read of stdin (a CI run read it 'R', then 'S'):
        # once it sleeps there, nothing moves, and a read gives the same sample again
        reads = []

        def same_sample() -> bool:
            (sample,) = source.read({proc.pid: USE})
            reads.append(sample)
            return len(reads) > 1 and reads[-1] == reads[-2] and sample.state == "S"

        poll(same_sample, 10, "the child asleep in its read of stdin, read twice alike")
        first = reads[-1]
        other = (GpuUse(gpu_index=1, memory_bytes=1 << 30, sm_share=10.0),)
        (moved_gpu,) = source.read({proc.pid: other})
        assert moved_gpu.gpus == other
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "DONE"
        (after,) = source.read({proc.pid: USE})
        assert after.write_chars - first.write_chars >= 16 * 65536
        assert after.read_chars - first.read_chars >= 16 * 65536
        assert after.gpus == USE
    finally:
        proc.kill()
        proc.wait()


def _open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_stay_bounded_by_the_processes_watched():
    """The tick keeps two descriptors open per process it reads; discovery closes those of
    processes that exited or are no longer watched, so rounds of processes starting and exiting
    leave the daemon's descriptor count where it started."""
    source = ProcessSource(children=True)
    before = _open_descriptors()
    for _ in range(3):
        batch = [spawn("import time; time.sleep(30)") for _ in range(20)]
        try:
            pids = {p.pid for p in batch}
            deadline = time.time() + 10
            while len(source.read({pid: USE for pid in pids})) < len(pids):
                assert time.time() < deadline, "discovery never saw every process"
                source.discover(pids)
            assert _open_descriptors() <= before + 2 * len(pids)
        finally:
            for p in batch:
                p.kill()
            for p in batch:
                p.wait()
        assert source.read({pid: USE for pid in pids}) == ()  # exited: nothing read
        source.discover(pids)  # still listed on a GPU (a stale NVML list), but exited
        assert _open_descriptors() == before
    source.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="reusing a pid on purpose needs root")
def test_a_childs_pid_reused_by_another_process_is_not_taken_for_a_child():
    """Scans between full ones remember every process's parent; a pid reused since is read
    again before it counts as a child, and a new child is found by such a scan."""
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time\n"
         "kid = subprocess.Popen(['sleep', '30'])\n"
         "print(kid.pid, flush=True)\n"
         "sys.stdin.readline(); kid.kill(); kid.wait()\n"  # told: its child exits
         "print('KILLED', flush=True)\n"
         "sys.stdin.readline()\n"  # told again: a new child
         "kid = subprocess.Popen(['sleep', '30'])\n"
         "print(kid.pid, flush=True)\n"
         "time.sleep(30)\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    stranger = None
    try:
        kid = int(parent.stdout.readline())
        source = ProcessSource(children=True)
        source.discover({parent.pid})  # a full scan
        assert {s.pid for s in source.read({parent.pid: USE})} == {parent.pid, kid}
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "KILLED"
        stranger = _spawn_with_pid(kid, "import time; time.sleep(30)")  # not its child
        source.discover({parent.pid})  # a scan between full ones
        assert {s.pid for s in source.read({parent.pid: USE})} == {parent.pid}
        parent.stdin.write("\n")
        parent.stdin.flush()
        new_kid = int(parent.stdout.readline())
        source.discover({parent.pid})
        assert {s.pid for s in source.read({parent.pid: USE})} == {parent.pid, new_kid}
        source.close()
    finally:
        for child in psutil.Process(parent.pid).children():
            child.kill()
        for proc in (parent, stranger):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_a_process_that_execs_is_renamed_to_the_program_it_became():
    """A shell or launcher that becomes the program (`pyenv exec python train.py` is a bash
    shim that execs python) kept the command line it had when first seen: the profile named
    the GPU process `bash .../pyenv exec python ...`."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    code = f"import os, sys; sys.stdin.readline(); os.execv({sleep!r}, ['sleep', '30'])"
    proc = subprocess.Popen([sys.executable, "-c", code, "before-exec"], stdin=subprocess.PIPE)
    try:
        poll(lambda: procs_module.read_argv(proc.pid)[-1:] == ["before-exec"], 10,
             "the child's argv in /proc")
        source = ProcessSource()
        source.discover({proc.pid})
        (sample,) = source.read({proc.pid: USE})
        assert sample.command.endswith("before-exec"), sample.command
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        poll(lambda: procs_module.read_argv(proc.pid) == ["sleep", "30"], 10,
             "the exec'd argv in /proc")

        def renamed():
            (now,) = source.read({proc.pid: USE})
            return now if now.command == "sleep 30" else None

        after = poll(renamed, 10, "the new command line in the sample")
        assert after.pid == sample.pid and after.start_time == sample.start_time
    finally:
        proc.kill()
        proc.wait()


def test_a_second_exec_soon_after_the_first_is_picked_up_once_its_turn_comes(monkeypatch):
    """An exec chain (a shim execs a shell that execs the program): the second rename came
    within the re-read interval, and since the idle process's stat then read the same bytes
    tick after tick, the cached sample kept the shell's command line for good."""
    monkeypatch.setattr(procs_module, "COMMAND_REREAD_S", 1.0)
    sleep = shutil.which("sleep")
    sh = shutil.which("sh")
    assert sleep is not None and sh is not None
    code = (f"import os, sys; sys.stdin.readline(); "
            f"os.execv({sh!r}, ['sh', '-c', 'read x; exec {sleep} 60'])")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        poll(lambda: procs_module.read_argv(proc.pid)[:2] == [sys.executable, "-c"], 10,
             "the child's argv in /proc")
        source = ProcessSource()
        source.discover({proc.pid})
        source.read({proc.pid: USE})
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()

        def command():
            (now,) = source.read({proc.pid: USE})
            return now.command

        poll(lambda: command().startswith("sh -c read x"), 10, "the shell's command line")
        proc.stdin.write(b"\n")  # at once: within the re-read interval of the first
        proc.stdin.flush()
        poll(lambda: command() == f"{sleep} 60" or command() == "sleep 60", 10,
             "the program's command line, once its turn came")
    finally:
        proc.kill()
        proc.wait()
