"""deploy/kubernetes/: the DaemonSet and its objects validate against a current Kubernetes
schema (kubernetes-validate, strict), hold the privileges mlcostd needs and no more, and the
config they mount is a config mlcostd accepts; the ServiceMonitor scrapes that Service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import tomllib
import yaml

from daemon import config as config_module

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kubernetes" / "mlcostd.yaml"
SERVICE_MONITOR = ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml"


def objects(path: Path) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(path.read_text()) if doc}


@pytest.mark.parametrize("kind", ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet",
                                  "Service"])
def test_each_object_validates_against_the_current_schema(kind):
    version = kubernetes_validate.latest_version()
    assert tuple(int(p) for p in version.split(".")[:2]) >= (1, 30)
    kubernetes_validate.validate(objects(MANIFEST)[kind], version, strict=True)


def test_the_schema_check_catches_a_misspelt_field():
    daemonset = objects(MANIFEST)["DaemonSet"]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True  # hostPID, misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, kubernetes_validate.latest_version(),
                                     strict=True)


def test_the_daemonset_has_what_mlcostd_needs_and_no_more():
    pod = objects(MANIFEST)["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # the driver reports host pids
    assert pod["runtimeClassName"] == "nvidia"
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"]["add"]) <= {"SYS_PTRACE", "SYS_ADMIN", "DAC_READ_SEARCH"}
    assert "SYS_PTRACE" in security["capabilities"]["add"]
    limits = container["resources"]["limits"]
    assert limits["cpu"] and limits["memory"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    pod_resources = volumes["pod-resources"]["hostPath"]
    assert pod_resources == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["pod-resources"]["readOnly"] is True
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/kubelet/pod-resources"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # Hostname is the node's, as dcgm-exporter's series say it
    assert env["MLCOST_HOSTNAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_mounted_config_is_one_mlcostd_accepts_and_serves_the_metrics_port():
    found = objects(MANIFEST)
    text = found["ConfigMap"]["data"]["mlcostd.toml"]
    loaded = config_module.from_dict(tomllib.loads(text), where="ConfigMap")
    [container] = found["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    [port] = container["ports"]
    assert loaded.api.metrics_listen == f"0.0.0.0:{port['containerPort']}"
    assert container["args"][:3] == ["run", "--config", "/etc/mlcost/mlcostd.toml"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(loaded.daemon.db).parent) in mounts  # the store survives a restart
    assert str(Path(loaded.api.socket).parent) in mounts
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}


def test_the_servicemonitor_scrapes_the_service_keeping_the_workload_labels():
    service = objects(MANIFEST)["Service"]
    monitor = objects(SERVICE_MONITOR)["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["honorLabels"] is True  # pod/namespace stay the workload's
    # the alerts match the scrape job mlcost*: the Operator names it from this label's value
    assert labels[monitor["spec"]["jobLabel"]].startswith("mlcost")
