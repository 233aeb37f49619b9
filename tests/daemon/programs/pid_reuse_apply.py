"""Run as pid 1 of a new pid namespace (`unshare --pid --fork --mount-proc`), as root: the
SIGTERM action's target exits while the action reads its /proc, and another process is made to
take its pid (ns_last_pid, which only this namespace's forks move), as a hostile user did on a
shared host (probe 138). Prints one JSON line: what the action answered, and whether the
process that took the pid was sent SIGTERM (it blocks the signal, so that a SIGTERM stays
pending in /proc/PID/status where it can be read, not raced by its exit)."""

import json
import signal
import subprocess
import sys

import psutil

from daemon.api import actions

target = subprocess.Popen(["sleep", "600"])
rec = {"id": "r1", "rule": "idle_gpu_held", "target": f"{target.pid}:0",
       "action": {"kind": "sigterm", "pid": target.pid,
                  "start_time": psutil.Process(target.pid).create_time()}}
taken: list[subprocess.Popen[bytes]] = []
read_facts = actions.read_kind_facts


def exits_and_its_pid_is_taken(pid: int, now: float):  # type: ignore[no-untyped-def]
    """The action's reads of the target (between its identity check and its signal)."""
    if pid == target.pid and not taken:
        target.kill()
        target.wait()
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(target.pid - 1))
        taken.append(subprocess.Popen(
            [sys.executable, "-c", "import signal, sys, time\n"
             "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
             "print('ready', flush=True)\ntime.sleep(600)"], stdout=subprocess.PIPE))
        assert taken[0].stdout is not None and taken[0].stdout.readline() == b"ready\n"
    return read_facts(pid, now)


actions.read_kind_facts = exits_and_its_pid_is_taken
try:
    result = actions.apply(rec, False, allow_actions=True)
    answer = {"done": result.done, "message": result.message}
except actions.ActionError as exc:
    answer = {"status": exc.status, "message": str(exc)}
other = taken[0]
with open(f"/proc/{other.pid}/status") as f:
    pending = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd", "ShdPnd"))]
print(json.dumps({**answer, "target": target.pid, "taken_by": other.pid,
                  "taker_sent_sigterm": any(mask >> (signal.SIGTERM - 1) & 1 for mask in pending)}))
for proc in taken:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
sys.exit(0)
