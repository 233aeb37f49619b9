"""Usage-based GPU cost: each GPU's hourly price split into used, held idle and unallocated.

OpenCost charges a Kubernetes GPU by allocation: requested GPUs x hours (`node_gpu_hourly_cost`
x `container_gpu_allocation`), however little the pod uses it (opencost#3900), and a
time-sliced GPU is charged whole to every pod on it (#3828). This split prices use instead, per
GPU, at one tick; for every GPU the parts sum to its price:

- **used**: each process's SM share of the GPU (NVML per-process utilization, percent of the
  time its kernels kept the SMs busy) x the GPU's price, charged to the process's container;
  shares that add up past 100 % (sampling skew) are scaled down to 100 %;
- **idle** (held idle): the rest of the price of a GPU that something holds (a process on it, or
  a pod the kubelet allocated it to), charged to the holders by memory held; when no process
  holds memory on it, equally to the containers the kubelet allocated it to (a time-sliced GPU's
  replicas each count once), else equally to its processes;
- **unallocated**: the whole price of a GPU that no process holds and no pod is allocated
  (OpenCost's `__idle__`).

A GPU that is lost or failing does no work: its price is held idle by whoever holds it.

GPUs the price counts that NVML does not list (`Host.unseen_gpus`: a p4d's 8 priced, 4 listed;
or every GPU, while NVML reads none) are charged as the burn charges them
(daemon.analysis.cost.unseen_gpus): each its price, unallocated, held by no one; their `gpu`
is `unseen-1`, `unseen-2`, ... and they have no UUID. So the parts of a host sum to its burn.

Who a part belongs to: a GPU the kubelet allocated to exactly one container is that container's
(as dcgm-exporter labels a device by its pod-resources allocation); on a GPU shared between
pods (time-slicing, MPS) or allocated to none, each process's own owner (its cgroup's pod,
named through pod-resources; on a GPU time-sliced within one namespace, that namespace alone)
says it. A process outside any pod is charged with no pod labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from daemon.sources.podresources import Allocation
from daemon.wire import Gpu, GpuShare

USED, IDLE, UNALLOCATED = "used", "idle", "unallocated"
USAGES = (USED, IDLE, UNALLOCATED)
NOBODY = Allocation("", "", "")  # a part no container holds (unallocated, or a host process)


@dataclass(frozen=True, slots=True)
class CostPart:
    """One part of one GPU's hourly price: who holds it and how it is used."""

    gpu_index: int  # NVML's index; -N for the Nth GPU NVML does not list
    uuid: str  # "" for a GPU NVML does not list
    usage: str  # USED | IDLE | UNALLOCATED
    holder: Allocation  # namespace, pod, container; NOBODY for unallocated
    per_hour: float

    @property
    def gpu(self) -> str:
        """The `gpu` label: NVML's index, or `unseen-N` for a GPU NVML does not list."""
        return str(self.gpu_index) if self.gpu_index >= 0 else f"unseen-{-self.gpu_index}"


class Holder(Protocol):
    """A process as the split reads it (daemon.wire.Process, or /metrics' ProcessState)."""

    @property
    def gpus(self) -> tuple[int, ...]: ...
    @property
    def per_gpu(self) -> tuple[GpuShare, ...]: ...
    @property
    def owner(self) -> Mapping[str, str]: ...


class Host(Protocol):
    """A host at one tick: its priced GPUs, its processes, and the GPUs its price counts that
    NVML does not list with their price together (daemon.wire.Now, or /metrics'
    MetricsState)."""

    @property
    def gpus(self) -> Sequence[Gpu]: ...
    @property
    def processes(self) -> Sequence[Holder]: ...
    @property
    def unseen_gpus(self) -> int: ...
    @property
    def unseen_per_hour(self) -> float | None: ...


def _holder(owner: Mapping[str, str], sole: Allocation | None) -> Allocation:
    if sole is not None:
        return sole
    return Allocation(owner.get("namespace", ""), owner.get("pod", ""),
                      owner.get("container", ""))


def split_gpu_cost(now: Host, allocations: Mapping[str, Sequence[Allocation]]) -> list[CostPart]:
    """Every GPU's price split into parts (see the module's docstring); `allocations` is the
    kubelet's {GPU UUID: [allocations]} (empty outside Kubernetes). Parts of the same GPU,
    usage and holder are merged. Every process on a GPU has a used part, and every holder its
    idle part, of zero dollars too: a holder's series read 0 while it does not compute (or
    computes the whole GPU), rather than coming and going (probe 156 F6)."""
    parts: dict[tuple[int, str, Allocation], float] = {}
    uuids: dict[int, str] = {}

    def add(index: int, usage: str, holder: Allocation, dollars: float) -> None:
        key = (index, usage, holder)
        parts[key] = parts.get(key, 0.0) + dollars

    on_gpu: dict[int, list[tuple[Holder, GpuShare | None]]] = {}
    for proc in now.processes:
        shares = {share.index: share for share in proc.per_gpu}
        for index in dict.fromkeys((*proc.gpus, *shares)):
            on_gpu.setdefault(index, []).append((proc, shares.get(index)))
    for gpu in now.gpus:
        price = gpu.price_per_hour
        if price is None:
            continue
        uuids[gpu.index] = gpu.uuid
        allocated = list(dict.fromkeys(allocations.get(gpu.uuid, ())))  # replicas once each
        sole = allocated[0] if len(allocated) == 1 else None
        users = on_gpu.get(gpu.index, [])
        if not users and not allocated:
            add(gpu.index, UNALLOCATED, NOBODY, price)
            continue
        sm = [max(share.sm_share or 0.0, 0.0) if share is not None and gpu.status == "ok"
              else 0.0 for _, share in users]
        scale = 100.0 / max(math.fsum(sm), 100.0)
        used = [price * s * scale / 100.0 for s in sm]
        for (proc, _), dollars in zip(users, used, strict=True):
            add(gpu.index, USED, _holder(proc.owner, sole), dollars)
        rest = max(price - math.fsum(used), 0.0)
        memory = [float(max(share.memory_bytes or 0, 0)) if share is not None else 0.0
                  for _, share in users]
        if math.fsum(memory) > 0:
            holders = [(_holder(proc.owner, sole), m) for (proc, _), m in zip(
                users, memory, strict=True)]
        elif allocated:
            holders = [(a, 1.0) for a in allocated]
        else:
            holders = [(_holder(proc.owner, sole), 1.0) for proc, _ in users]
        weight = math.fsum(w for _, w in holders)
        for holder, w in holders:
            if w > 0:
                add(gpu.index, IDLE, holder, rest * w / weight)
    # GPUs the price counts that NVML does not list: held by no one, their price unallocated
    unseen, unseen_per_hour = now.unseen_gpus, now.unseen_per_hour
    if unseen > 0 and unseen_per_hour is not None:
        for number in range(1, unseen + 1):
            uuids[-number] = ""
            add(-number, UNALLOCATED, NOBODY, unseen_per_hour / unseen)
    return [CostPart(index, uuids[index], usage, holder, dollars)
            for (index, usage, holder), dollars in parts.items()]
