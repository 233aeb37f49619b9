"""The simulated host's AWS Systems Manager: the one runbook a resize starts, AWS-ResizeInstance,
run against the simulated EC2 (daemon.sim.ec2), for the demo and the tests.

A host cannot resize itself: the stop it asks for shuts it down, daemon included, before the
type can change. mlcostd therefore asks Systems Manager to run Amazon's AWS-ResizeInstance
runbook (stop, change the type, start), which runs on AWS's side while the host is down. moto
has no Automation backend, so this is a local server shaped like the SSM API (JSON 1.1:
`X-Amz-Target: AmazonSSM.<Operation>`) answering StartAutomationExecution for that runbook and
GetAutomationExecution; the runbook's steps are real boto3 calls to the EC2 endpoint it is given.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RESIZE_RUNBOOK = "AWS-ResizeInstance"  # Amazon's runbook: InstanceId, InstanceType
MAX_BODY = 64 * 1024  # a request body larger than any of these operations'


class Executions:
    """The automation executions started so far, and the runbook's steps against an EC2."""

    def __init__(self, ec2_factory: Callable[[str], Any], region: str,
                 on_started: Callable[[str, str], None] | None = None) -> None:
        self._ec2_factory = ec2_factory
        self._region = region
        # Told (instance id, its type) when the runbook has started an instance again: on AWS
        # that is the host booting, as the new type.
        self._on_started = on_started
        self._lock = threading.Lock()
        self._status: dict[str, dict[str, Any]] = {}

    def start(self, body: dict[str, Any]) -> dict[str, Any]:
        """StartAutomationExecution: AWS-ResizeInstance only, run in a thread."""
        if body.get("DocumentName") != RESIZE_RUNBOOK:
            raise SsmError("InvalidDocument",
                           f"this simulated SSM runs only {RESIZE_RUNBOOK}")
        parameters = body.get("Parameters") or {}
        try:
            (instance_id,), (instance_type,) = (parameters["InstanceId"],
                                                 parameters["InstanceType"])
        except (KeyError, TypeError, ValueError):
            raise SsmError("InvalidAutomationExecutionParametersException",
                           "InstanceId and InstanceType take one value each") from None
        execution_id = str(uuid.uuid4())
        with self._lock:
            self._status[execution_id] = {"AutomationExecutionId": execution_id,
                                          "DocumentName": RESIZE_RUNBOOK,
                                          "AutomationExecutionStatus": "InProgress"}
        threading.Thread(target=self._resize, args=(execution_id, str(instance_id),
                                                    str(instance_type)), daemon=True).start()
        return {"AutomationExecutionId": execution_id}

    def get(self, body: dict[str, Any]) -> dict[str, Any]:
        """GetAutomationExecution."""
        with self._lock:
            found = self._status.get(str(body.get("AutomationExecutionId")))
            if found is None:
                raise SsmError("AutomationExecutionNotFoundException",
                               "no such automation execution")
            return {"AutomationExecution": dict(found)}

    def _resize(self, execution_id: str, instance_id: str, instance_type: str) -> None:
        """The runbook's steps: stop, wait until stopped, change the type, start."""
        try:
            ec2 = self._ec2_factory(self._region)
            ec2.stop_instances(InstanceIds=[instance_id])
            ec2.get_waiter("instance_stopped").wait(
                InstanceIds=[instance_id], WaiterConfig={"Delay": 1, "MaxAttempts": 60})
            ec2.modify_instance_attribute(InstanceId=instance_id,
                                          InstanceType={"Value": instance_type})
            ec2.start_instances(InstanceIds=[instance_id])
            if self._on_started is not None:
                self._on_started(instance_id, instance_type)
            update: dict[str, Any] = {"AutomationExecutionStatus": "Success"}
        except Exception as exc:  # what the runbook's execution would report as its failure
            update = {"AutomationExecutionStatus": "Failed", "FailureMessage": str(exc)}
        with self._lock:
            self._status[execution_id].update(update)


class SsmError(Exception):
    """An error SSM answers with: its type (botocore's error code) and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def serve(executions: Executions) -> ThreadingHTTPServer:
    """A server on 127.0.0.1 (a free port) answering the two operations, in a daemon thread."""
    operations = {"AmazonSSM.StartAutomationExecution": executions.start,
                  "AmazonSSM.GetAutomationExecution": executions.get}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 <= length <= MAX_BODY:
                    raise SsmError("ValidationException", "request body too large")
                body = json.loads(self.rfile.read(length) or b"{}")
                operation = operations.get(self.headers.get("X-Amz-Target", ""))
                if operation is None or not isinstance(body, dict):
                    raise SsmError("InvalidAction", "not an operation this SSM answers")
                self._answer(200, operation(body))
            except SsmError as exc:
                self._answer(400, {"__type": exc.code, "message": str(exc)})
            except ValueError:
                self._answer(400, {"__type": "SerializationException",
                                   "message": "the body is not JSON"})

        def _answer(self, status: int, document: dict[str, Any]) -> None:
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # quiet: the demo's log is the daemon's
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, name="simulated-ssm", daemon=True).start()
    return server
