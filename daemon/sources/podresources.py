"""The kubelet's pod-resources API: which pod, namespace and container each GPU is allocated to.

`v1.PodResourcesLister/List` on the kubelet's unix socket
(`/var/lib/kubelet/pod-resources/kubelet.sock`; mount the directory, not the socket, so a
kubelet restart does not break it, KEP-606/KEP-2403). The device ids of `nvidia.com/gpu` are
GPU UUIDs (the NVIDIA device plugin's default), `GPU-...::N` for a time-sliced replica.

gRPC comes from the optional `grpcio` (`pip install mlcost[kubernetes]`); the three messages we
read are decoded here from the protobuf wire format (tags 1-3 of four small messages), so no
generated code and no protobuf runtime is needed. Without grpcio, or without the socket, there
is simply no pod name: the pod UID and container id still come from the cgroup.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from daemon.sources.redact import redact_name
from daemon.sources.safe_text import one_line

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
CALL_TIMEOUT_S = 1.0
REFRESH_S = 5.0  # List at most this often (it walks every pod on the node)
MAX_RESPONSE_BYTES = 16 << 20
_GRPC_FORK_SUPPORT = "GRPC_ENABLE_FORK_SUPPORT"


def import_grpc() -> Any:
    """grpcio, loaded with its fork support off.

    The daemon starts children with a `preexec_fn` (the simulated host's workloads, the command
    `mlcostd profile` runs), which means fork() rather than vfork(). With gRPC's fork support on
    (its default), fork() runs gRPC's handlers, which start its poller threads again in the
    child; they then find the descriptors the child closes before exec gone ("epoll_wait error:
    Bad file descriptor") and the child may never become the program it was to run. Nothing here
    uses gRPC in a forked child, so the support is off. grpcio reads the setting once, when it
    loads; the variable is put back afterwards so the children's environment is the user's, and
    a value the user set is kept."""
    if "grpc" not in sys.modules and os.environ.get(_GRPC_FORK_SUPPORT) is None:
        os.environ[_GRPC_FORK_SUPPORT] = "false"
        try:
            return _load_grpc()
        finally:
            del os.environ[_GRPC_FORK_SUPPORT]
    return _load_grpc()


def _load_grpc() -> Any:
    try:
        import grpc
    except ImportError:
        raise RuntimeError("grpcio is not installed (pip install 'mlcost[kubernetes]')") \
            from None
    return grpc


@dataclass(frozen=True, slots=True)
class Allocation:
    """Who a device is allocated to."""

    namespace: str
    pod: str
    container: str


# -- the protobuf wire format, just what List's answer needs ---------------------------------


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) of one message: bytes for length-delimited fields, int for
    varints; 32- and 64-bit fields are skipped. ValueError on a malformed message."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ValueError("truncated field")
            yield number, data[i:i + size]
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: bytes | int) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def _name(value: bytes | int) -> str:
    """A pod's, namespace's or container's name, as mlcostd may show it (in /metrics labels,
    each process's owner, the store): whoever made the pod chose it, so control bytes are shown
    and a secret-looking one hidden, tagged so that two stay two (redact_name: a pod's labels
    key its /metrics series and its owner's ledger job)."""
    return redact_name(one_line(_text(value)))


def parse_list_response(data: bytes) -> dict[str, list[Allocation]]:
    """ListPodResourcesResponse -> {device id: [allocations]} (a device id time-sliced between
    pods appears under each). Messages (k8s.io/kubelet/pkg/apis/podresources/v1/api.proto):
    Response{1: PodResources}, PodResources{1: name, 2: namespace, 3: ContainerResources},
    ContainerResources{1: name, 2: ContainerDevices}, ContainerDevices{1: resource_name,
    2: device_ids}."""
    devices: dict[str, list[Allocation]] = {}
    for number, pod in fields(data):
        if number != 1 or not isinstance(pod, bytes):
            continue
        name = namespace = ""
        containers: list[bytes] = []
        for n, value in fields(pod):
            if n == 1:
                name = _name(value)
            elif n == 2:
                namespace = _name(value)
            elif n == 3 and isinstance(value, bytes):
                containers.append(value)
        for container in containers:
            container_name = ""
            device_lists: list[bytes] = []
            for n, value in fields(container):
                if n == 1:
                    container_name = _name(value)
                elif n == 2 and isinstance(value, bytes):
                    device_lists.append(value)
            for device_list in device_lists:
                for n, value in fields(device_list):
                    if n == 2:
                        device = _text(value).split("::", 1)[0]  # time-sliced replica
                        devices.setdefault(device, []).append(
                            Allocation(namespace, name, container_name))
    return devices


class PodResources:
    """The latest List answer, refreshed at most every REFRESH_S; never raises."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout_s: float = CALL_TIMEOUT_S,
                 refresh_s: float = REFRESH_S) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.refresh_s = refresh_s
        self.status = "not asked yet"
        self._devices: dict[str, list[Allocation]] = {}
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()
        self._warned = False

    def available(self) -> bool:
        return bool(self.socket_path) and os.path.exists(self.socket_path)

    def allocation(self, device_ids: tuple[str, ...]) -> Allocation | None:
        """Who the devices are allocated to: one pod and container, else None (unknown, or
        shared between several)."""
        found = self.candidates(device_ids)
        return found.pop() if len(found) == 1 else None

    def candidates(self, device_ids: tuple[str, ...]) -> set[Allocation]:
        """Every container the devices are allocated to: one for a whole GPU, several for a
        GPU time-sliced between pods (the kubelet does not say which replica a process
        uses); empty when unknown."""
        if not device_ids or not self.available():
            return set()
        devices = self.devices()
        return {a for d in device_ids for a in devices.get(d, ())}

    def cached(self) -> dict[str, list[Allocation]]:
        """The latest List answer without asking again: never blocks on the kubelet (for
        /metrics, rendered on the event loop); {} before the first answer. No lock: devices()
        holds it through the call, and replaces the dict whole, never changes it."""
        return self._devices

    def devices(self) -> dict[str, list[Allocation]]:
        """{device id: allocations} from the latest List (asked again after refresh_s)."""
        with self._lock:
            now = time.monotonic()
            if now - self._fetched_at >= self.refresh_s:
                self._fetched_at = now
                try:
                    self._devices = parse_list_response(self._call())
                    self.status = "ok"
                except Exception as exc:  # noqa: BLE001 - a status, never a crash
                    self.status = f"{type(exc).__name__}: {exc}"
                    if not self._warned:
                        self._warned = True
                        log.warning("kubelet pod-resources %s: %s; pods are known by UID only",
                                    self.socket_path, self.status)
            return self._devices

    def _call(self) -> bytes:
        grpc = import_grpc()
        options = [("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
                   ("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"unix://{self.socket_path}", options=options) as channel:
            call = channel.unary_unary(LIST_METHOD, request_serializer=lambda _: b"",
                                       response_deserializer=lambda data: data)
            return bytes(call(None, timeout=self.timeout_s))
