"""Usage-based GPU cost (daemon.analysis.usage_cost, daemon.api.usage_metrics): each GPU's price
split into used, held idle and unallocated, per container, summing to the price; time-sliced
GPUs shared by several pods; label values bounded as the workload series' are."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.analysis.usage_cost import IDLE, NOBODY, UNALLOCATED, USED, split_gpu_cost
from daemon.api.metrics import OTHER, Metrics
from daemon.sources.podresources import Allocation
from daemon.wire import Now

PRICE = 4.0  # $/h per GPU
ML = Allocation("ml", "train-0", "trainer")
WEB = Allocation("web", "serve-0", "server")
NOTEBOOK = Allocation("research", "nb-0", "notebook")


def gpu(index: int, status: str = "ok") -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index}", "name": "NVIDIA A10G", "status": status,
            "price_per_hour": PRICE}


def proc(pid: int, uses: list[tuple[int, int, float]], owner: Allocation | None = None,
         cost: float = 1.0) -> dict[str, Any]:
    """A process on GPUs [(index, memory bytes, SM share %)] in `owner`'s pod."""
    labels = {} if owner is None else {"namespace": owner.namespace, "pod": owner.pod,
                                       "container": owner.container}
    return {"key": f"{pid}:1.000", "pid": pid, "start_time": 1.0, "user": "alice",
            "job": "train.py", "cost": cost, "burn_per_hour": 1.0, "owner": labels,
            "gpus": [{"index": i, "memory_bytes": m, "sm_share": s} for i, m, s in uses]}


def now(gpus: list[dict[str, Any]], processes: list[dict[str, Any]]) -> Now:
    return Now.from_dict({"host": {"hostname": "node-a"}, "ts": 1000.0, "gpus": gpus,
                          "processes": processes})


def by_part(parts) -> dict[tuple[int, str, Allocation], float]:
    return {(p.gpu_index, p.usage, p.holder): p.per_hour for p in parts}


def per_gpu_sums(parts) -> dict[int, float]:
    sums: dict[int, float] = {}
    for p in parts:
        sums[p.gpu_index] = sums.get(p.gpu_index, 0.0) + p.per_hour
    return sums


def test_a_gpu_no_pod_holds_is_unallocated_whole():
    parts = split_gpu_cost(now([gpu(0)], []), {})
    assert by_part(parts) == {(0, UNALLOCATED, NOBODY): PRICE}


def test_a_busy_pod_pays_its_sm_share_as_used_and_the_rest_as_idle():
    parts = split_gpu_cost(now([gpu(0)], [proc(1, [(0, 8 << 30, 30.0)], ML)]), {"GPU-0": [ML]})
    assert by_part(parts) == pytest.approx({(0, USED, ML): 0.3 * PRICE,
                                            (0, IDLE, ML): 0.7 * PRICE})


def test_a_gpu_allocated_to_one_container_charges_it_whatever_the_process_cgroup_says():
    """dcgm-exporter's rule: the device's allocation names it (a process whose pod name is not
    known yet is still that container's)."""
    parts = split_gpu_cost(now([gpu(0)], [proc(1, [(0, 1 << 30, 50.0)])]), {"GPU-0": [ML]})
    assert {p.holder for p in parts} == {ML}


def test_an_allocated_gpu_with_no_process_is_held_idle_by_its_pod():
    parts = split_gpu_cost(now([gpu(0), gpu(1)], []), {"GPU-1": [NOTEBOOK]})
    assert by_part(parts) == {(0, UNALLOCATED, NOBODY): PRICE, (1, IDLE, NOTEBOOK): PRICE}


def test_a_time_sliced_gpu_splits_use_by_sm_share_and_idle_by_memory_between_its_pods():
    processes = [proc(1, [(0, 3 << 30, 40.0)], ML), proc(2, [(0, 1 << 30, 20.0)], WEB)]
    # the device plugin's replicas: the same UUID under each pod (the ::N suffix is cut)
    parts = split_gpu_cost(now([gpu(0)], processes), {"GPU-0": [ML, WEB]})
    assert by_part(parts) == pytest.approx({
        (0, USED, ML): 0.4 * PRICE, (0, USED, WEB): 0.2 * PRICE,
        (0, IDLE, ML): 0.4 * PRICE * 0.75, (0, IDLE, WEB): 0.4 * PRICE * 0.25})


def test_a_time_sliced_gpu_nobody_runs_on_is_held_idle_equally_by_its_replicas():
    parts = split_gpu_cost(now([gpu(0)], []), {"GPU-0": [ML, WEB, ML]})
    assert by_part(parts) == pytest.approx({(0, IDLE, ML): PRICE / 2, (0, IDLE, WEB): PRICE / 2})


def test_on_a_gpu_shared_within_a_namespace_a_process_whose_pod_is_unknown_pays_its_namespace():
    """The kubelet does not say which replica of a time-sliced GPU a process uses: when all its
    pods are in one namespace, the owner reader gives the namespace alone (test_podresources)."""
    serving = Allocation("serving", "", "")
    pods = [Allocation("serving", "vllm-a", "vllm"), Allocation("serving", "vllm-b", "vllm")]
    parts = split_gpu_cost(now([gpu(0)], [proc(1, [(0, 1 << 30, 25.0)], serving)]),
                           {"GPU-0": pods})
    assert by_part(parts) == pytest.approx({(0, USED, serving): 0.25 * PRICE,
                                            (0, IDLE, serving): 0.75 * PRICE})


def test_sm_shares_past_100_percent_are_scaled_so_used_never_exceeds_the_price():
    processes = [proc(1, [(0, 1 << 30, 90.0)], ML), proc(2, [(0, 1 << 30, 60.0)], WEB)]
    parts = split_gpu_cost(now([gpu(0)], processes), {})
    assert by_part(parts) == pytest.approx({(0, USED, ML): PRICE * 0.6,
                                            (0, USED, WEB): PRICE * 0.4,
                                            (0, IDLE, ML): 0.0, (0, IDLE, WEB): 0.0})


def test_a_lost_gpu_does_no_work_its_holder_holds_it_idle():
    parts = split_gpu_cost(now([gpu(0, status="lost")], [proc(1, [(0, 1 << 30, 80.0)], ML)]),
                           {})
    assert by_part(parts) == {(0, IDLE, ML): PRICE, (0, USED, ML): 0.0}


def test_a_holders_used_series_reads_0_while_it_does_not_compute_instead_of_going():
    """Probe 156 F6: `usage="used"` of a checkpointing job's GPU came and went with its SM
    share (a part of $0 was left out), so a per-pod used $/h graph had holes, not zeros."""
    fake = FakeDaemon([proc(1, [(0, 1 << 30, 0.0)], ML)], 1, {"GPU-0": [ML]})
    text = Metrics(fake).render().decode()
    usage = {s.labels["usage"]: s.value for s in samples(text, "mlcost_gpu_usage_hourly_cost")}
    assert usage == {USED: 0.0, IDLE: PRICE}


def test_a_process_outside_any_pod_is_charged_with_no_pod_labels():
    parts = split_gpu_cost(now([gpu(0)], [proc(1, [(0, 1 << 30, 10.0)])]), {})
    assert {p.holder for p in parts} == {NOBODY}
    assert {p.usage for p in parts} == {USED, IDLE}


def test_every_gpu_parts_sum_to_its_price_on_a_mixed_host():
    processes = [proc(1, [(0, 3 << 30, 40.0), (1, 2 << 30, 55.0)], ML),
                 proc(2, [(0, 0, 20.0)], WEB), proc(3, [(2, 0, 0.0)])]
    allocations = {"GPU-0": [ML, WEB], "GPU-1": [ML], "GPU-3": [NOTEBOOK]}
    parts = split_gpu_cost(now([gpu(i) for i in range(5)], processes), allocations)
    assert per_gpu_sums(parts) == pytest.approx(dict.fromkeys(range(5), PRICE))
    assert all(p.per_hour >= 0 for p in parts)


# -- the /metrics families ---------------------------------------------------------------------


class FakeDaemon:
    """What the collector reads: now() and the kubelet's allocations."""

    analyzer = None

    def __init__(self, processes: list[dict[str, Any]], gpus: int,
                 allocations: dict[str, list[Allocation]]) -> None:
        self.processes = processes
        self.gpus = [gpu(i) for i in range(gpus)]
        self.allocations = allocations

    def now(self) -> dict[str, Any]:
        return {"host": {"hostname": "node-a"}, "ts": 1000.0, "gpus": self.gpus,
                "processes": self.processes, "price": {"per_hour": PRICE * len(self.gpus)},
                "cost": {"total": 1.0}}

    def pod_allocations(self) -> dict[str, list[Allocation]]:
        return self.allocations


def samples(text: str, name: str) -> list[Any]:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_the_families_sit_beside_opencosts_and_sum_to_the_node_gpu_cost():
    processes = [proc(1, [(0, 3 << 30, 40.0)], ML), proc(2, [(0, 1 << 30, 20.0)], WEB)]
    fake = FakeDaemon(processes, 3, {"GPU-0": [ML, WEB], "GPU-1": [NOTEBOOK]})
    text = Metrics(fake).render().decode()
    [hourly] = samples(text, "mlcost_node_gpu_hourly_cost")
    [count] = samples(text, "mlcost_node_gpus")
    assert (hourly.labels, hourly.value, count.value) == ({"node": "node-a"}, PRICE, 3.0)
    allocation = {(s.labels["namespace"], s.labels["pod"]): s.value
                  for s in samples(text, "mlcost_container_gpu_allocation")}
    assert allocation == {("ml", "train-0"): 0.5, ("web", "serve-0"): 0.5,
                          ("research", "nb-0"): 1.0}
    usage = samples(text, "mlcost_gpu_usage_hourly_cost")
    assert math.fsum(s.value for s in usage) == pytest.approx(hourly.value * count.value)
    by_namespace: dict[tuple[str, str], float] = {}
    for s in usage:
        key = (s.labels.get("namespace", ""), s.labels["usage"])
        by_namespace[key] = by_namespace.get(key, 0.0) + s.value
    assert by_namespace == pytest.approx({
        ("ml", USED): 1.6, ("ml", IDLE): 1.2, ("web", USED): 0.8, ("web", IDLE): 0.4,
        ("research", IDLE): PRICE, ("", UNALLOCATED): PRICE})
    unallocated = [s for s in usage if s.labels["usage"] == UNALLOCATED]
    assert [s.labels for s in unallocated] == [
        {"node": "node-a", "gpu": "2", "UUID": "GPU-2", "usage": UNALLOCATED}]


def test_pods_past_the_label_limit_fold_into_other_and_their_dollars_add_up():
    pods = [Allocation("ns", f"pod-{i}", "c") for i in range(4)]
    processes = [proc(i + 1, [(0, 1 << 30, 10.0)], pod) for i, pod in enumerate(pods)]
    fake = FakeDaemon(processes, 1, {"GPU-0": pods})
    text = Metrics(fake, label_values=2).render().decode()
    usage = samples(text, "mlcost_gpu_usage_hourly_cost")
    keys = [(s.labels.get("pod"), s.labels["usage"]) for s in usage]
    assert len(keys) == len(set(keys))  # folded series are summed, never repeated
    assert {pod for pod, _ in keys} == {"pod-0", "pod-1", OTHER}
    used = {pod: s.value for s in usage if s.labels["usage"] == USED
            for pod in (s.labels["pod"],)}
    assert used[OTHER] == pytest.approx(2 * 0.1 * PRICE)
    assert math.fsum(s.value for s in usage) == pytest.approx(PRICE)


# -- GPUs the price counts that NVML does not list (probe 156 F1) ----------------------------


def now_unseen(gpus: list[dict[str, Any]], unseen: int) -> Now:
    """A host whose price counts `unseen` GPUs more than NVML lists, as /v1/now's burn says."""
    return Now.from_dict({"host": {"hostname": "node-a"}, "ts": 1000.0, "gpus": gpus,
                          "processes": [], "burn": {"unseen_gpus": unseen,
                                                    "unseen_per_hour": PRICE * unseen}})


def test_gpus_nvml_does_not_list_are_unallocated_whole_each_under_its_own_gpu_label():
    parts = split_gpu_cost(now_unseen([gpu(0), gpu(1)], 2), {"GPU-0": [ML]})
    assert math.fsum(p.per_hour for p in parts) == pytest.approx(4 * PRICE)
    unseen = sorted((p.gpu, p.uuid, p.usage, p.holder, p.per_hour) for p in parts
                    if p.gpu_index < 0)
    assert unseen == [("unseen-1", "", UNALLOCATED, NOBODY, PRICE),
                      ("unseen-2", "", UNALLOCATED, NOBODY, PRICE)]


class UnseenDaemon(FakeDaemon):
    """A p4d priced for 8 GPUs whose NVML lists 4 (the `faults` scenario): /v1/now's burn
    charges the 4 others as idle."""

    def now(self) -> dict[str, Any]:
        document = super().now()
        document["price"] = {"per_hour": PRICE * 8, "gpu_count": 8}
        document["burn"] = {"total_per_hour": PRICE * 8, "idle_per_hour": PRICE * 7,
                            "price_per_gpu": PRICE, "unseen_gpus": 4,
                            "unseen_per_hour": PRICE * 4}
        return document


def test_the_usage_split_and_the_node_gpus_count_the_gpus_nvml_does_not_list():
    fake = UnseenDaemon([proc(1, [(0, 1 << 30, 50.0)], ML)], 4, {"GPU-0": [ML]})
    text = Metrics(fake).render().decode()
    [hourly] = samples(text, "mlcost_node_gpu_hourly_cost")
    [count] = samples(text, "mlcost_node_gpus")
    assert (hourly.value, count.value) == (PRICE, 8.0)
    usage = samples(text, "mlcost_gpu_usage_hourly_cost")
    assert math.fsum(s.value for s in usage) == pytest.approx(8 * PRICE)  # the host's burn
    unseen = sorted((s.labels["gpu"], s.value) for s in usage if "UUID" not in s.labels)
    assert unseen == [(f"unseen-{n}", PRICE) for n in range(1, 5)]
    assert all(s.labels["usage"] == UNALLOCATED for s in usage if "UUID" not in s.labels)
    [gauge] = samples(text, "mlcost_unseen_gpus")
    assert (gauge.labels, gauge.value) == ({"Hostname": "node-a"}, 4.0)


class UnreadDaemon(FakeDaemon):
    """A p4d whose NVML lists no GPU (not started: the driver missing): the burn charges its
    whole price as 8 GPUs with no reading (`unread_gpus`)."""

    def now(self) -> dict[str, Any]:
        document = super().now()
        document["price"] = {"per_hour": PRICE * 8, "gpu_count": 8}
        document["burn"] = {"total_per_hour": PRICE * 8, "idle_per_hour": PRICE * 8,
                            "price_per_gpu": PRICE, "unread_gpus": 8}
        return document


def test_a_host_nvml_lists_no_gpu_of_has_its_whole_price_unallocated():
    text = Metrics(UnreadDaemon([], 0, {})).render().decode()
    [hourly] = samples(text, "mlcost_node_gpu_hourly_cost")
    [count] = samples(text, "mlcost_node_gpus")
    assert (hourly.value, count.value) == (PRICE, 8.0)
    usage = samples(text, "mlcost_gpu_usage_hourly_cost")
    assert math.fsum(s.value for s in usage) == pytest.approx(8 * PRICE)
    assert {s.labels["usage"] for s in usage} == {UNALLOCATED}
    [gauge] = samples(text, "mlcost_unseen_gpus")
    assert gauge.value == 8.0


def test_the_live_state_counts_the_burns_unseen_and_unread_gpus_at_its_price_per_gpu():
    from types import SimpleNamespace

    from daemon.analysis.cost import HostPrice, unread_burn
    from daemon.api.metrics_state import _unseen

    price = HostPrice(PRICE * 8, 8, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "test",
                      None)
    unread = unread_burn(SimpleNamespace(ts=1.0), price, 8)  # type: ignore[arg-type]
    assert _unseen(unread) == {"unseen_gpus": 8, "unseen_per_hour": PRICE * 8}
    assert _unseen(None) == {}
