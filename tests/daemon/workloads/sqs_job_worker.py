"""A GPU worker of an embedding service, written without mlcost in mind: producers send jobs
to an AWS SQS queue; this process receives the next one with boto3, runs it on the GPU and
deletes the message. With `--wait S` (1..20) it long-polls (ReceiveMessage's WaitTimeSeconds:
SQS holds the request until a message comes or S seconds pass); with `--wait 0` it
short-polls and, when the queue came back empty, sleeps a moment and asks again.

Usage: sqs_job_worker.py --endpoint URL --queue NAME [--wait S] [--sleep S] [--step-ms MS]
"""

import argparse
import json
import os
import signal
import sys
import time

import _gpu
import boto3

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", help="SQS endpoint URL (default: AWS's)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--wait", type=int, default=20, help="WaitTimeSeconds (0: short poll)")
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sqs = boto3.client("sqs", region_name=args.region, endpoint_url=args.endpoint)
    queue_url = sqs.get_queue_url(QueueName=args.queue)["QueueUrl"]
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    _gpu.ready()
    while True:
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1,
                                  WaitTimeSeconds=args.wait)
        messages = got.get("Messages", [])
        if not messages:
            if args.wait == 0:
                time.sleep(args.sleep)  # nothing queued: ask again in a moment
            continue
        for message in messages:
            job = json.loads(message["Body"])
            dev.kernel(args.step_ms / 1000, sm=0.8)
            sqs.send_message(QueueUrl=queue_url + "-done",
                             MessageBody=json.dumps({"id": job["id"], "dims": 768}))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


if __name__ == "__main__":
    main()
