"""Stands in for a Jupyter server on the simulated host: starts one kernel the way Jupyter's
kernel manager does (the kernel program with `-f kernel-ID.json`, its connection file) and waits
on it. The kernel's stdin is a pipe that nobody writes to, as a notebook's input() waits for a
user who is away.

    python jupyter_stub.py notebook_cells.py --cells idle"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid


def main() -> None:
    runtime = tempfile.mkdtemp(prefix="jupyter-runtime-", dir=os.environ.get("MLCOST_SIM_DIR"))
    connection = os.path.join(runtime, f"kernel-{uuid.uuid4()}.json")
    with open(connection, "w") as f:
        json.dump({"transport": "tcp", "ip": "127.0.0.1", "shell_port": 0}, f)
    kernel = subprocess.Popen([sys.executable, *sys.argv[1:], "-f", connection],
                              stdin=subprocess.PIPE)
    signal.signal(signal.SIGTERM, lambda *_: (kernel.terminate(), sys.exit(0)))
    kernel.wait()


if __name__ == "__main__":
    main()
