"""A training job whose input pipeline cannot keep up: it reads its shards from disk (page cache
dropped before each pass, so the reads really hit the device), decodes them on the CPU, and the
storage is slow, so each step spends most of its time waiting for data.

--workers 0 reads in the main process (like a DataLoader with num_workers=0); --workers N forks N
loader processes that feed a queue (num_workers=N), so the main process waits in Queue.get.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import threading
import time
import zlib
from pathlib import Path

from daemon.sim.device import Device
from daemon.sim.workloads import _common

GIB = 1 << 30
# What it holds on each of its GPUs unless --memory-gib says (daemon.sim.scenario.resized
# places the workloads of a resized host by it).
MEMORY_GIB = 20.0
MIB = 1 << 20
READ_SIZE = 256 << 10


def write_dataset(data_dir: Path, size_mib: int) -> Path:
    """Create the shard file once (varied bytes, so decoding is real work), flushed to disk."""
    path = data_dir / "train-shard-000.bin"
    block = os.urandom(MIB)
    # 0600, as every file of a simulated host's state dir, whatever the umask (probe 149 L3:
    # open() left it 0644); never through a link planted at its name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "wb") as f:
        for i in range(size_mib):
            f.write(i.to_bytes(8, "little") + block[8:])
        f.flush()
        os.fsync(f.fileno())
    return path


def drop_cache(fd: int) -> None:
    """Evict the shard from the page cache so the next pass reads from the device."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class SlowStorage:
    """A network filesystem stand-in: a thread reads the shard from the disk at the speed the
    storage allows and hands the bytes over through a pipe. The reader blocks in a real read()
    of the pipe, as it would on a slow NFS or object-store mount."""

    def __init__(self, path: Path, batch_bytes: int, bytes_per_second: float,
                 start: int = 0, step: int = 1) -> None:
        self.read_fd, self._write_fd = os.pipe()
        self._thread = threading.Thread(
            target=self._serve, args=(path, batch_bytes, bytes_per_second, start, step),
            name="storage", daemon=True)
        self._thread.start()

    def _serve(self, path: Path, batch_bytes: int, bytes_per_second: float, start: int,
               step: int) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            n_batches = max(1, os.fstat(fd).st_size // batch_bytes)
            while True:
                drop_cache(fd)
                for b in range(start, n_batches, step):
                    started = time.monotonic()
                    done = 0
                    while done < batch_bytes:
                        chunk = os.pread(fd, min(READ_SIZE, batch_bytes - done),
                                         b * batch_bytes + done)
                        if not chunk:
                            break
                        os.write(self._write_fd, chunk)
                        done += len(chunk)
                        lag = done / bytes_per_second - (time.monotonic() - started)
                        if lag > 0:
                            time.sleep(lag)
        except OSError:
            return  # the reader closed the pipe: the job is over
        finally:
            os.close(fd)


def read_shard(storage: SlowStorage, nbytes: int) -> bytes:
    """Read one batch worth of the shard from the (slow) storage."""
    chunks = []
    done = 0
    while done < nbytes:
        chunk = os.read(storage.read_fd, min(READ_SIZE, nbytes - done))
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def decode_batch(raw: bytes) -> int:
    """Decompress-and-check stand-in: CRC the batch and compress a slice of it."""
    return zlib.crc32(raw) ^ len(zlib.compress(raw[: 128 << 10], 1))


def batches(path: Path, batch_bytes: int, bytes_per_second: float, start: int = 0, step: int = 1):
    """Yield decoded batches forever, one pass over the shard after another."""
    storage = SlowStorage(path, batch_bytes, bytes_per_second, start, step)
    while True:
        yield decode_batch(read_shard(storage, batch_bytes))


def loader_worker(path: Path, batch_bytes: int, bytes_per_second: float, worker_id: int,
                  num_workers: int, queue: mp.Queue, parent: int) -> None:
    for batch in batches(path, batch_bytes, bytes_per_second, worker_id, num_workers):
        if os.getppid() != parent:
            return  # the trainer is gone
        queue.put(batch)


def train_step(dev: Device, batch: int, step_seconds: float, sm: float) -> None:
    dev.kernel(step_seconds, sm=sm)


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--memory-gib", type=float, default=MEMORY_GIB)
    p.add_argument("--dataset-mib", type=int, default=96)
    p.add_argument("--batch-kib", type=int, default=2048)
    p.add_argument("--read-mbps", type=float, default=16.0, help="storage speed, MB/s per reader")
    p.add_argument("--step-seconds", type=float, default=0.04)
    p.add_argument("--sm", type=float, default=0.8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    log = _common.setup("data_starved")
    gpu = _common.gpu_list(args.gpu)[0]
    made_dir = args.data_dir is None
    data_dir = Path(args.data_dir or tempfile.mkdtemp(
        prefix="dataset-", dir=os.environ.get("MLCOST_SIM_DIR")))
    workers: list[mp.Process] = []
    try:
        path = write_dataset(data_dir, args.dataset_mib)
        batch_bytes = args.batch_kib << 10
        rate = args.read_mbps * 1e6
        if args.workers > 0:
            queue: mp.Queue = mp.Queue(maxsize=2 * args.workers)
            for w in range(args.workers):
                proc = mp.Process(
                    target=loader_worker, name=f"loader-{w}", daemon=True,
                    args=(path, batch_bytes, rate, w, args.workers, queue, os.getpid()),
                )
                proc.start()
                workers.append(proc)
            loader = iter(queue.get, None)
        else:
            loader = batches(path, batch_bytes, rate)
        # Attach after forking the loaders, as CUDA is initialized after DataLoader workers start.
        with Device(gpu_index=gpu) as dev:
            dev.alloc(int(args.memory_gib * GIB))
            for step, batch in enumerate(loader, start=1):
                train_step(dev, batch, args.step_seconds, args.sm)
                if step % 100 == 0:
                    log.info("step %d", step)
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.join(timeout=2)
        if made_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            (data_dir / "train-shard-000.bin").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
