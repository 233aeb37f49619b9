"""Stands in for a person who opened `python3` in a terminal on the GPU box, typed a few lines
(attach the GPU, load a model, run one pass), then left with the prompt open. This program is
the terminal: it starts the interpreter on a pseudo-terminal of its own (python's pty module),
types the lines at its prompt, and keeps showing what it prints until it is stopped (then it
closes the terminal, and the interpreter with it).

Usage: repl_in_terminal.py
"""

import os
import pty
import signal
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINES = [
    "import os, _gpu",
    "gpu = _gpu.attach(int(os.environ.get('MLCOST_SIM_GPUS', '0').split(',')[0]))",
    "weights = gpu.alloc(9 << 30)",
    "for _ in range(30): gpu.kernel(0.1, sm=0.9)",
    "",
    "print('one pass done')",
]


def main() -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)}
    repl = subprocess.Popen([sys.executable, "-q"], stdin=slave, stdout=slave, stderr=slave,
                            cwd=HERE, env=env, close_fds=True)
    os.close(slave)

    def close(*_):
        repl.terminate()
        try:
            repl.wait(10)
        except subprocess.TimeoutExpired:
            repl.kill()
            repl.wait()
        os._exit(0)

    signal.signal(signal.SIGTERM, close)
    shown = bytearray()  # the terminal's screen: all it printed
    changed = threading.Condition()

    def show() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            sys.stdout.write(data.decode("utf-8", "replace"))
            sys.stdout.flush()
            with changed:
                shown.extend(data)
                changed.notify_all()

    def prompts() -> int:
        return shown.count(b">>> ") + shown.count(b"... ")

    threading.Thread(target=show, daemon=True).start()
    typed_at = 0  # how many prompts it had shown when the last line was typed
    for line in LINES:
        with changed:
            changed.wait_for(lambda seen=typed_at: prompts() > seen)  # its next prompt
            typed_at, start = prompts(), len(shown)
        typed = line.encode()
        for _ in range(10):
            os.write(master, typed + b"\n")
            # what is typed before readline has set the terminal up is lost (it flushes the
            # input): type it again where it is not echoed back
            with changed:
                if changed.wait_for(lambda t=typed, at=start: t in shown[at:], timeout=2.0):
                    break
    repl.wait()


if __name__ == "__main__":
    main()
