"""A hand-written prefetching loop, written without mlcost or torch in mind: a reader thread
reads batches from files and puts them on a queue.Queue; the loop takes them with q.get().

Usage: queue_prefetch.py MODE DIR, where MODE is
  read    the files are FIFOs in DIR that a helper fills slowly: the reader blocks in read()
  decode  the reader decodes each batch in Python on the CPU, slower than the loop takes them
  quiet   the reader waits on an Event nobody sets: nothing works, the loop just waits
Prints READY once the loop waits for its first batch.
"""

import os
import queue
import subprocess
import sys
import threading

CHUNK = 4096


def read_batches(path: str, batches: queue.Queue) -> None:
    with open(path, "rb", buffering=0) as shard:
        while True:
            raw = shard.read(CHUNK)
            batches.put(raw)


def decode_batches(path: str, batches: queue.Queue) -> None:
    with open(path, "wb") as out:
        out.write(os.urandom(CHUNK))
    while True:
        with open(path, "rb") as shard:
            raw = shard.read()
        total = 0
        for _ in range(200):
            for byte in raw:
                total = (total * 31 + byte) & 0xFFFFFFFF
        batches.put(total)


def wait_for_work(path: str, batches: queue.Queue) -> None:
    threading.Event().wait()


def main() -> None:
    mode, folder = sys.argv[1], sys.argv[2]
    path = os.path.join(folder, "shard0")
    if mode == "read":
        os.mkfifo(path)
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_trickle.py")
        subprocess.Popen([sys.executable, helper, "1.0", path])
    target = {"read": read_batches, "decode": decode_batches, "quiet": wait_for_work}[mode]
    batches: queue.Queue = queue.Queue(maxsize=4)
    threading.Thread(target=target, args=(path, batches), name="reader", daemon=True).start()
    print("READY", flush=True)
    steps = 0
    while True:
        batch = batches.get()
        steps += 1 + 0 * len(str(batch))


if __name__ == "__main__":
    main()
