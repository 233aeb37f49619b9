"""`/metrics` families for where each GPU's activity comes from and DCGM's profiling ratios.

Where DCGM holds a GPU's profiling counters (daemon.sources.dcgm), its SM activity goes into
`mlcost_gpu_sm_activity_ratio` like GPM's would, and its tensor and DRAM activity are exposed
here; `mlcost_gpu_activity_source_info` says per GPU which reader it is (`dcgm-exporter`,
`nv-hostengine`, `gpm`, `none`, `held by another reader`), so a dashboard can tell a GPU with no
reading from an idle one. Labels are the GPU series' (dcgm-exporter's `gpu`, `UUID`,
`modelName`, `Hostname`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from daemon.sources.dcgm import DcgmActivity

Sources = Mapping[int, tuple[str, str, DcgmActivity | None]]  # NvmlSource.activity_sources()


def activity_families(sources: Sources, labels_of: Mapping[int, list[str]]) -> Iterator[Metric]:
    """`labels_of`: GPU index -> the values of (gpu, UUID, modelName, Hostname)."""
    names = ["gpu", "UUID", "modelName", "Hostname"]
    source = InfoMetricFamily("mlcost_gpu_activity_source", "Who reads the GPU's profiling "
                              "counters for its SM activity: dcgm-exporter, nv-hostengine (DCGM "
                              "holds them, no reading), gpm, none (no GPM), or held by another "
                              "reader (GPM refused as in use)", labels=names)
    tensor = GaugeMetricFamily("mlcost_gpu_tensor_activity_ratio", "Tensor pipe activity "
                               "(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE), where DCGM reads the GPU",
                               labels=names)
    dram = GaugeMetricFamily("mlcost_gpu_dram_activity_ratio", "Device memory interface "
                             "activity (DCGM_FI_PROF_DRAM_ACTIVE), where DCGM reads the GPU",
                             labels=names)
    for index, (_, reader, activity) in sorted(sources.items()):
        labels = labels_of.get(index)
        if labels is None:
            continue
        source.add_metric(labels, {"source": reader})
        if activity is not None and activity.tensor is not None:
            tensor.add_metric(labels, activity.tensor)
        if activity is not None and activity.dram is not None:
            dram.add_metric(labels, activity.dram)
    yield from (source, tensor, dram)
