"""A GPU worker of a render service, written without mlcost in mind: producers PUBLISH jobs on a
redis channel; this process subscribes (redis-py's PubSub), runs each on the GPU and pushes the
result on a list. Between jobs it waits for the next message, in one of the ways redis-py
offers: iterating `listen()`, or polling `get_message(timeout=...)`, or `parse_response`.

Usage: redis_pubsub_worker.py --server HOST:PORT [--channel NAME] [--wait listen|get_message|
       parse_response] [--step-ms MS]
"""

import argparse
import json
import os
import signal
import sys

import redis

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def messages(pubsub: redis.client.PubSub, wait: str):
    """The published messages, as they come, waiting for each in the way asked for."""
    if wait == "listen":
        yield from pubsub.listen()
    while True:
        if wait == "get_message":
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=2.0)
        else:
            message = pubsub.handle_message(pubsub.parse_response(block=True))
        if message is not None:
            yield message


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the redis server")
    parser.add_argument("--channel", default="jobs")
    parser.add_argument("--wait", choices=("listen", "get_message", "parse_response"),
                        default="listen")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.server.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(args.channel)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(10 << 30)
        print("READY", flush=True)
        for message in messages(pubsub, args.wait):
            if message.get("type") != "message":
                continue
            job = json.loads(message["data"])
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            r.rpush(f"{args.channel}:done", json.dumps({"id": job["id"], "frames": 240}))


if __name__ == "__main__":
    main()
