"""`/metrics` families for usage-based Kubernetes GPU cost, named to sit beside OpenCost's.

OpenCost exports `node_gpu_hourly_cost` (the hourly cost of one GPU on a node), `node_gpu_count`
and `container_gpu_allocation` (GPUs a container was allocated), and prices a container's GPU
by allocation. These families carry the same facts under the `mlcost_` prefix (so both
exporters can be scraped by one Prometheus without a clash) and add the split by use
(daemon.analysis.usage_cost):

- `mlcost_node_gpu_hourly_cost{node}`: one GPU's price an hour (host price / GPU count);
- `mlcost_node_gpus{node}`: the GPUs priced on this node (OpenCost's `node_gpu_count`; a
  `_count` suffix belongs to histograms and summaries in Prometheus's naming), those NVML
  does not list included (`Host.unseen_gpus`, charged as the burn charges them);
- `mlcost_container_gpu_allocation{namespace,pod,container,node}`: GPUs the kubelet allocated
  to a container; a GPU time-sliced between n containers counts 1/n to each (OpenCost counts
  it whole for every one of them);
- `mlcost_gpu_usage_hourly_cost{node,gpu,UUID,usage,namespace,pod,container}`: each GPU's
  price an hour split into `usage` = `used` | `idle` | `unallocated`; per GPU the series sum
  to `mlcost_node_gpu_hourly_cost`, and per node to `mlcost_node_gpus` x that, the host's
  burn. Unallocated series (and processes outside any pod) have no pod labels; a GPU NVML
  does not list is `gpu="unseen-N"`, unallocated, without a UUID.

`node` is the daemon's host name (`MLCOST_HOSTNAME`, which the DaemonSet sets to the node's
name). Label values are bounded by the workload series' caps (`[api].metrics_label_values` per
label, the rest folded into `other`); series are at most GPUs x (containers on each + 1) x 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from daemon.analysis.usage_cost import Host, split_gpu_cost
from daemon.api.exposition import Family
from daemon.sources.podresources import Allocation

HOLDER_LABELS = ("namespace", "pod", "container")
Bound = Callable[[str, str], str]  # (label, raw value) -> the value shown ("" leaves it out)
LabelKey = tuple[tuple[str, str], ...]


def _holder_labels(holder: Allocation, bound: Bound) -> LabelKey:
    values = (holder.namespace, holder.pod, holder.container)
    return tuple((label, shown) for label, raw in zip(HOLDER_LABELS, values, strict=True)
                 if (shown := bound(label, raw)))


def usage_cost_families(now: Host, allocations: Mapping[str, Sequence[Allocation]],
                        node: str, bound: Bound) -> Iterator[Family]:
    """The four families of one scrape. `allocations`: the kubelet's {GPU UUID: allocations};
    `bound` gives a pod label's value as shown (cleaned, capped, folded into `other`), so
    series that fold into one are summed, never repeated."""
    priced = [g for g in now.gpus if g.price_per_hour is not None]
    hourly = Family("mlcost_node_gpu_hourly_cost", "One GPU's price an hour on this node (host "
                    "price / GPU count), as OpenCost's node_gpu_hourly_cost", "gauge")
    count = Family("mlcost_node_gpus", "GPUs priced on this node, as OpenCost's "
                   "node_gpu_count", "gauge")
    unseen = now.unseen_gpus if now.unseen_per_hour is not None else 0
    if priced or unseen > 0:
        per_gpu = (priced[0].price_per_hour if priced else None)
        if per_gpu is None:
            per_gpu = (now.unseen_per_hour or 0.0) / unseen
        hourly.add((("node", node),), float(per_gpu))
        count.add((("node", node),), float(len(priced) + unseen))
    allocation = Family("mlcost_container_gpu_allocation", "GPUs the kubelet allocated to a "
                        "container; a GPU shared by n containers counts 1/n", "gauge")
    shares: dict[LabelKey, float] = {}
    for gpu in now.gpus:
        holders = list(dict.fromkeys(allocations.get(gpu.uuid, ())))
        for holder in holders:
            key = _holder_labels(holder, bound)
            shares[key] = shares.get(key, 0.0) + 1.0 / len(holders)
    for key, gpus in shares.items():
        allocation.add((*key, ("node", node)), gpus)
    usage = Family("mlcost_gpu_usage_hourly_cost", "A GPU's price an hour split by use: used "
                   "(SM share), idle (held, unused) and unallocated; per GPU they sum to its "
                   "price", "gauge")
    labels_of: dict[Allocation, LabelKey] = {}  # each holder's labels, once a scrape
    dollars: dict[LabelKey, float] = {}
    for part in split_gpu_cost(now, allocations):
        labels = labels_of.get(part.holder)
        if labels is None:
            labels = labels_of[part.holder] = _holder_labels(part.holder, bound)
        uuid = bound("UUID", part.uuid) if part.uuid else ""
        key = (("node", node), ("gpu", part.gpu), *((("UUID", uuid),) if uuid else ()),
               ("usage", part.usage), *labels)
        dollars[key] = dollars.get(key, 0.0) + part.per_hour
    for key, value in dollars.items():
        usage.add(key, value)
    yield from (hourly, count, allocation, usage)
