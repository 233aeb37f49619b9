"""An RQ worker of a GPU upscaling service, written without mlcost in mind: it loads the model
onto the GPU once, then runs RQ's worker on its queue (RQ's documented way to preload what
every job needs: a worker script instead of `rq worker`). Producers enqueue `upscale` jobs
(rq_gpu_worker.upscale) on the redis server. With `--worker-class simple` the jobs run in this
process (rq.SimpleWorker: the model stays where the jobs are); with `fork`, RQ's default
worker, each job runs in a forked work horse. Under `rq worker --worker-class rq.SimpleWorker`
(this folder on its path) the first job loads the model, which stays for the next ones.
Between jobs the worker waits for the next one (rq 3.0: BLMOVE on one
queue, BLPOP on several).

Usage: rq_gpu_worker.py --server HOST:PORT [--queues NAME...] [--worker-class simple|fork]
       rq worker --url redis://HOST:PORT --path DIR --worker-class rq.SimpleWorker QUEUE
"""

import argparse
import os
import signal
import sys

import _gpu
import redis
from rq import Queue, SimpleWorker, Worker

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
_model: list = []  # the model's device, once loaded


def _load_model() -> None:
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)  # the model's weights
    _model.append(dev)
    _gpu.ready()


def upscale(image: str) -> dict:
    if not _model:  # under `rq worker --worker-class rq.SimpleWorker`: at the first job
        _load_model()
    _model[0].kernel(0.3, sm=0.8)
    return {"image": image, "scale": 4}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the redis server")
    parser.add_argument("--queues", nargs="+", default=["upscale"], help="in priority order")
    parser.add_argument("--worker-class", choices=("simple", "fork"), default="simple")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.server.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    _load_model()
    worker_class = SimpleWorker if args.worker_class == "simple" else Worker
    worker_class([Queue(name, connection=r) for name in args.queues], connection=r).work(logging_level="WARNING")


if __name__ == "__main__":
    main()
