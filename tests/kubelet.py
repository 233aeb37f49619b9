"""A local kubelet pod-resources server for the tests: real gRPC (grpcio) on a unix socket in a
temp folder, answering `v1.PodResourcesLister/List` with the protobuf bytes a kubelet sends
(encoded here from the field numbers of k8s.io/kubelet/pkg/apis/podresources/v1/api.proto)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon.sources.podresources import import_grpc


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def list_response(pods: list[tuple[str, str, list[tuple[str, list[str]]]]]) -> bytes:
    """ListPodResourcesResponse for [(namespace, pod, [(container, [GPU UUIDs])])], with the
    fields a real kubelet adds beside them (topology, packed CPU ids, memory)."""
    out = b""
    for namespace, pod, containers in pods:
        body = field(1, pod) + field(2, namespace)
        for container, gpus in containers:
            devices = field(1, "nvidia.com/gpu")
            for gpu in gpus:
                devices += field(2, gpu)
            devices += field(3, field(1, field(1, 0)))  # TopologyInfo{nodes: [NUMANode{ID 0}]}
            c = field(1, container) + field(2, devices) + field(3, bytes([2, 3, 4]))
            c += field(4, field(1, "memory") + field(2, 1 << 30))
            body += field(3, c)
        out += field(1, body)
    return out


@contextmanager
def pod_resources_server(socket_path: Path, response: bytes) -> Iterator[list[bytes]]:
    """Serve `response` to every List call; yields the requests received."""
    # loaded as the daemon loads it, with gRPC's fork support off: the tests start daemons and
    # Prometheus with a preexec_fn (a fork) while this server's threads run
    grpc = import_grpc()
    requests: list[bytes] = []

    def list_pods(request: bytes, context: Any) -> bytes:
        requests.append(request)
        return response

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(list_pods)})
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield requests
    finally:
        server.stop(grace=None).wait(5)
