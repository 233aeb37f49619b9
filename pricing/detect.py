"""Which cloud instance is this host? Config override, then DMI, then one metadata probe.

DMI (`/sys/class/dmi/id`) names the cloud without a network round trip; then only that cloud's
metadata service is asked. When DMI says nothing, the three services are asked in parallel.
Everything together stays within `timeout_s` (probes run in daemon threads, so a stalled DNS
lookup or a server that never answers cannot hold the caller). The result is cached per process.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

CLOUDS = ("aws", "gcp", "azure")
DEFAULT_ENDPOINTS: Mapping[str, str] = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
}
AZURE_API_VERSION = "2021-02-01"
AWS_TOKEN_TTL_S = "21600"
# Every Azure VM carries this chassis asset tag; a Hyper-V VM elsewhere does not.
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"
_MAX_BODY = 64 * 1024
# Metadata services are link-local: never send these requests through an HTTP proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Instance:
    """What this host is. provider None means off-cloud (or unknown); `source` says how we
    know, `detail` what each step saw."""

    provider: str | None  # "aws" | "gcp" | "azure" | "lambda" | None
    instance_type: str | None
    region: str | None
    lifecycle: str | None  # "on-demand" | "spot" | "commit-1y" (config only) | None
    source: str
    detail: str = ""
    instance_id: str | None = None  # AWS: what a resize acts on (IMDS instance-id)

    @property
    def on_cloud(self) -> bool:
        return self.provider is not None


class ProbeError(Exception):
    """A metadata service did not answer as that cloud's service would."""


_cache: dict[tuple[Any, ...], Instance] = {}
_cache_lock = threading.Lock()


def clear_detect_cache() -> None:
    """Forget the cached detection (tests, or after the config changed)."""
    with _cache_lock:
        _cache.clear()


def detect(
    override: Any = None,
    *,
    dmi_root: str | os.PathLike[str] = "/sys/class/dmi/id",
    endpoints: Mapping[str, str] | None = None,
    timeout_s: float = 1.0,
) -> Instance:
    """Detect the cloud instance: config `override` (dict or object with provider, type or
    instance_type, region, lifecycle) first; fields it leaves out are detected. Never raises
    for a missing or odd metadata service; off-cloud it says so in `source`."""
    wanted = _override_fields(override)
    if wanted.get("provider") and wanted.get("instance_type"):
        return Instance(
            provider=wanted["provider"],
            instance_type=wanted["instance_type"],
            region=wanted.get("region"),
            lifecycle=wanted.get("lifecycle"),
            source="config",
            detail="instance set in the config; DMI and metadata not consulted",
        )
    aws_disabled = os.environ.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true"
    merged_endpoints = {**DEFAULT_ENDPOINTS, **(endpoints or {})}
    key = (str(dmi_root), tuple(sorted(merged_endpoints.items())), timeout_s, aws_disabled)
    with _cache_lock:
        found = _cache.get(key)
    if found is None:
        found = _detect_uncached(Path(dmi_root), merged_endpoints, timeout_s, aws_disabled)
        with _cache_lock:
            _cache[key] = found
    if not wanted:
        return found
    # A partial override (e.g. lifecycle = "commit-1y", which no metadata service knows) wins.
    changes = {k: v for k, v in wanted.items() if v is not None}
    return replace(found, **changes, source=f"config + {found.source}")


def _override_fields(override: Any) -> dict[str, str]:
    if override is None:
        return {}
    def get(name: str) -> Any:
        if isinstance(override, Mapping):
            return override.get(name)
        return getattr(override, name, None)
    fields = {
        "provider": get("provider"),
        "instance_type": get("instance_type") or get("type"),
        "region": get("region"),
        "lifecycle": get("lifecycle"),
    }
    result = {k: str(v).strip() for k, v in fields.items() if v not in (None, "")}
    if "provider" in result:
        result["provider"] = result["provider"].lower()
    return result


# ---------------------------------------------------------------- DMI


def read_dmi(dmi_root: Path) -> dict[str, str]:
    """The DMI fields that name a cloud; missing files read as ''."""
    fields = {}
    for name in ("sys_vendor", "product_name", "product_version", "bios_vendor", "bios_version",
                 "chassis_asset_tag"):
        try:
            fields[name] = (dmi_root / name).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            fields[name] = ""
    return fields


def cloud_from_dmi(dmi: Mapping[str, str]) -> tuple[str | None, str]:
    """(cloud or None, what in DMI said so)."""
    vendor, product = dmi.get("sys_vendor", ""), dmi.get("product_name", "")
    bios_vendor, bios_version = dmi.get("bios_vendor", ""), dmi.get("bios_version", "")
    if "amazon ec2" in vendor.lower() or "amazon ec2" in bios_vendor.lower():
        return "aws", f"DMI sys_vendor {vendor!r}, bios_vendor {bios_vendor!r}"
    if "amazon" in bios_version.lower() or "amazon" in dmi.get("product_version", "").lower():
        return "aws", f"DMI bios_version {bios_version!r} (Xen-based EC2)"
    if vendor.lower() == "google" or product == "Google Compute Engine":
        return "gcp", f"DMI sys_vendor {vendor!r}, product_name {product!r}"
    if vendor == "Microsoft Corporation" and product == "Virtual Machine":
        tag = dmi.get("chassis_asset_tag", "")
        if tag == AZURE_ASSET_TAG:
            return "azure", "DMI Microsoft Virtual Machine with the Azure chassis asset tag"
        return "azure", f"DMI {vendor!r} {product!r} (Hyper-V; Azure unless metadata says no)"
    return None, "no cloud vendor in DMI" if vendor or product else "no DMI vendor"


# ---------------------------------------------------------------- metadata probes


def _request(method: str, url: str, headers: Mapping[str, str], deadline: float):
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProbeError("time budget spent")
    from pricing.http import FetchError, read_bounded_sync  # aiohttp only when probing

    request = urllib.request.Request(url, method=method, headers=dict(headers))
    try:
        with _OPENER.open(request, timeout=remaining) as response:
            raw = read_bounded_sync(response, max_bytes=_MAX_BODY, deadline=deadline,
                                    shown=url)
            return response.headers, raw.decode("utf-8", errors="replace").strip()
    except FetchError as exc:  # too large, or past the probe's time budget
        raise ProbeError(str(exc)) from None
    except urllib.error.HTTPError as exc:
        raise ProbeError(f"HTTP {exc.code} from {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProbeError(f"{url}: {reason}") from None


def probe_aws(base: str, deadline: float) -> Instance:
    """IMDSv2: a session token first, then the instance facts with that token."""
    _, token = _request("PUT", f"{base}/latest/api/token",
                        {"X-aws-ec2-metadata-token-ttl-seconds": AWS_TOKEN_TTL_S}, deadline)
    if not token:
        raise ProbeError("IMDSv2 answered an empty token")
    auth = {"X-aws-ec2-metadata-token": token}

    def get(path: str) -> str:
        return _request("GET", f"{base}/latest/meta-data/{path}", auth, deadline)[1]

    instance_type = get("instance-type")
    region: str | None
    try:
        region = get("placement/region")
    except ProbeError:
        region = get("placement/availability-zone")[:-1] or None
    try:
        life_cycle = get("instance-life-cycle").lower()
    except ProbeError:
        life_cycle = ""
    lifecycle = {"spot": "spot", "on-demand": "on-demand"}.get(life_cycle)
    try:
        instance_id: str | None = get("instance-id").strip() or None
    except ProbeError:
        instance_id = None
    return Instance("aws", instance_type, region, lifecycle, "aws metadata (IMDSv2)",
                    f"instance-life-cycle {life_cycle or 'not given'!r}", instance_id)


def probe_gcp(base: str, deadline: float) -> Instance:
    """GCP metadata; the answer must carry `Metadata-Flavor: Google` to count."""
    flavor = {"Metadata-Flavor": "Google"}

    def get(path: str) -> str:
        headers, body = _request("GET", f"{base}/computeMetadata/v1/instance/{path}", flavor,
                                 deadline)
        if headers.get("Metadata-Flavor") != "Google":
            raise ProbeError(f"{base} answered without 'Metadata-Flavor: Google'; not GCP")
        return body

    machine_type = get("machine-type").rsplit("/", 1)[-1]  # projects/N/machineTypes/T
    zone = get("zone").rsplit("/", 1)[-1]  # projects/N/zones/us-central1-a
    region = zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else zone or None
    try:
        model = get("scheduling/provisioning-model").upper()
    except ProbeError:
        model = ""
    if not model:
        try:
            model = "SPOT" if get("scheduling/preemptible").upper() == "TRUE" else "STANDARD"
        except ProbeError:
            model = ""
    lifecycle = {"SPOT": "spot", "STANDARD": "on-demand"}.get(model)
    return Instance("gcp", machine_type, region, lifecycle, "gcp metadata",
                    f"zone {zone!r}, provisioning-model {model or 'not given'!r}")


def probe_azure(base: str, deadline: float) -> Instance:
    """Azure IMDS, text format, one field per request."""
    def get(field: str) -> str:
        url = (f"{base}/metadata/instance/compute/{field}"
               f"?api-version={AZURE_API_VERSION}&format=text")
        return _request("GET", url, {"Metadata": "true"}, deadline)[1]

    vm_size = get("vmSize")
    if not vm_size:
        raise ProbeError("Azure IMDS answered an empty vmSize")
    location = get("location") or None
    try:
        priority = get("priority")
    except ProbeError:
        priority = ""
    lifecycle = "spot" if priority.lower() in ("spot", "low") else "on-demand"
    return Instance("azure", vm_size, location, lifecycle, "azure metadata (IMDS)",
                    f"priority {priority or 'Regular'!r}")


PROBES: Mapping[str, Callable[[str, float], Instance]] = {
    "aws": probe_aws, "gcp": probe_gcp, "azure": probe_azure,
}


def _run_probes(clouds: list[str], endpoints: Mapping[str, str], deadline: float):
    """(first Instance found or None, {cloud: error}). Returns by the deadline at the latest."""
    answers: queue.Queue[tuple[str, Instance | None, str]] = queue.Queue()

    def run(cloud: str) -> None:
        try:
            answers.put((cloud, PROBES[cloud](endpoints[cloud].rstrip("/"), deadline), ""))
        except Exception as exc:  # a probe failure is a finding, not a crash
            answers.put((cloud, None, str(exc) or type(exc).__name__))

    for cloud in clouds:
        threading.Thread(target=run, args=(cloud,), name=f"mlcost-probe-{cloud}",
                         daemon=True).start()
    errors: dict[str, str] = {}
    while len(errors) < len(clouds):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            cloud, instance, error = answers.get(timeout=remaining)
        except queue.Empty:
            break
        if instance is not None:
            return instance, errors
        errors[cloud] = error
    for cloud in clouds:
        errors.setdefault(cloud, "no answer within the time budget")
    return None, errors


def _detect_uncached(dmi_root: Path, endpoints: Mapping[str, str], timeout_s: float,
                     aws_disabled: bool) -> Instance:
    deadline = time.monotonic() + timeout_s
    cloud, dmi_says = cloud_from_dmi(read_dmi(dmi_root))
    notes = []
    clouds = [cloud] if cloud else list(CLOUDS)
    if aws_disabled and "aws" in clouds:
        clouds.remove("aws")
        notes.append("aws: probe off (AWS_EC2_METADATA_DISABLED=true)")
    found, errors = _run_probes(clouds, endpoints, deadline) if clouds else (None, {})
    notes.extend(f"{name}: {error}" for name, error in errors.items())
    if found is not None:
        source = f"{found.source} (cloud from DMI)" if cloud else found.source
        return replace(found, source=source, detail="; ".join([dmi_says, found.detail, *notes]))
    if cloud is not None and not dmi_says.endswith("unless metadata says no)"):
        return Instance(cloud, None, None, None, f"dmi ({cloud}); metadata did not answer",
                        "; ".join([dmi_says, *notes]))
    return Instance(
        None, None, None, None,
        f"off-cloud: no DMI vendor and no metadata service answered within {timeout_s:.1f} s",
        "; ".join([dmi_says, *notes]),
    )
