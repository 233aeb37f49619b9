"""The simulated host's EC2: a local moto server holding one instance of the scenario's type, so
`a` on a resize recommendation in the demo runs the real boto3 path (AWS's dry run of stop and
start, then Systems Manager's AWS-ResizeInstance runbook: stop, wait, modify-instance-attribute,
start) against something that answers like EC2 and SSM (daemon.sim.ssm: moto has no Automation).

`python -m daemon.sim.ec2 --scenario demo` starts the server on 127.0.0.1 (a free port), creates
the instance, prints one JSON line ({"endpoint", "instance_id", "region", "type", "env"}) and serves
until stdin closes or SIGTERM. mlcost-top --demo points its daemon at it with
AWS_ENDPOINT_URL_EC2, AWS_ENDPOINT_URL_SSM and [instance].id. moto is the `demo` extra (`pip install 'mlcost[demo]'`,
what `make demo` installs); without it this exits 3 and says so, and the demo shows the resize as
commands only.

Each time the runbook starts the instance again (a resize done) it prints one more line,
{"booted": instance_id, "type": the new type, "scenario": the scenario's TOML as the host boots
(daemon.sim.scenario.booted_as: the new type with its GPUs, the workloads started again on
them)}: on AWS the host boots then, as that type, and mlcostd starts again on it; the demo
starts its daemon again on that scenario (mlcost_tui.demo). A type whose GPUs the simulator
cannot be (not in the price catalog, or no NVIDIA GPU) fails the runbook with that reason.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

# Credentials for the local server only (moto accepts any); never a user's real keys.
DEMO_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "mlcost-demo", "AWS_SECRET_ACCESS_KEY": "mlcost-demo"}
# An image id the instance is launched from (moto does not check that it exists).
DEMO_IMAGE = "ami-12c6146b"
NO_MOTO_EXIT = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daemon.sim.ec2",
                                     description="a local EC2 (moto) with the scenario's instance",
                                     allow_abbrev=False)
    parser.add_argument("--scenario", default="demo", help="built-in scenario name or TOML file")
    args = parser.parse_args(argv)

    from daemon.sim import scenario

    instance = scenario.load(args.scenario).instance
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        print("moto is not installed (pip install 'mlcost[demo]'): no simulated EC2",
              file=sys.stderr)
        return NO_MOTO_EXIT
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update(DEMO_CREDENTIALS, AWS_ENDPOINT_URL_EC2=endpoint)
    import boto3

    region = instance.region or "us-east-1"
    ec2 = boto3.client("ec2", region_name=region)
    made = ec2.run_instances(ImageId=DEMO_IMAGE, MinCount=1, MaxCount=1,
                             InstanceType=instance.type)
    instance_id = made["Instances"][0]["InstanceId"]
    from daemon.sim import ssm

    said = threading.Lock()  # one line at a time on stdout

    def booted(started_id: str, started_type: str) -> None:
        booted_as = scenario.booted_as(args.scenario, started_type)  # raises: the run fails
        with said:
            print(json.dumps({"booted": started_id, "type": started_type,
                              "scenario": booted_as}), flush=True)

    ssm_server = ssm.serve(ssm.Executions(lambda r: boto3.client("ec2", region_name=r), region,
                                          on_started=booted))
    ssm_endpoint = f"http://127.0.0.1:{ssm_server.server_address[1]}"
    # What the daemon's environment needs to reach this EC2 and SSM with boto3's own
    # configuration.
    env = {**DEMO_CREDENTIALS, "AWS_ENDPOINT_URL_EC2": endpoint,
           "AWS_ENDPOINT_URL_SSM": ssm_endpoint}
    with said:
        print(json.dumps({"endpoint": endpoint, "instance_id": instance_id, "region": region,
                          "type": instance.type, "env": env}), flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())

    def until_stdin_closes() -> None:  # the demo that started it is gone
        sys.stdin.read()
        done.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    done.wait()
    ssm_server.shutdown()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
