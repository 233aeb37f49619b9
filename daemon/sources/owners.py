"""Who owns a process: its Kubernetes pod and container, Slurm job and step, or systemd unit.

Read from `/proc/PID/cgroup` once per process, when discovery first sees it (bounded size), and
for Slurm from an optional file a job prolog writes (account, partition). A process's
environment (`/proc/PID/environ`) is never read: it holds the job's secrets too.

The parsing functions are pure (text in, owner dict out) and tested on recorded cgroup files of
each kind (tests/daemon/fixtures/cgroups/). Owner keys: pod_uid, pod, namespace, container,
container_id, slurm_job, slurm_step, slurm_account, slurm_partition, systemd_unit. Pod name,
namespace and container come from the kubelet's pod-resources API (daemon.sources.podresources)
where its socket is mounted; the cgroup alone gives the pod UID and the container id.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping

from daemon.sources.podresources import PodResources
from daemon.sources.redact import redact_name
from daemon.sources.safe_text import one_line

CGROUP_MAX_BYTES = 64 * 1024  # a /proc/PID/cgroup is a few hundred bytes; never read more
SLURM_INFO_MAX_BYTES = 4096
SLURM_INFO_KEYS = ("account", "partition")

# dcgm-exporter's pattern for a pod UID in a cgroup path; systemd spells its dashes as
# underscores (kubepods-burstable-pod1a2b_3c4d....slice). Real UIDs are 36 characters, static
# pods' 32 (a hash).
_POD = re.compile(r"pod([a-f0-9_-]+)")
_POD_UID_MIN = 32
# The runtime's scope under the systemd cgroup driver; a bare id under the cgroupfs driver.
_CONTAINER_SCOPE = re.compile(r"(?:cri-containerd|crio|docker|libpod)-([0-9a-f]{64})\.scope")
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
_SLURM_JOB = re.compile(r"job_(\d{1,20})")
_SLURM_STEP = re.compile(r"step_(\d{1,10}|batch|extern|interactive)")
_UNIT = re.compile(r"[A-Za-z0-9:_.@\\-]{1,200}\.(?:service|scope)")
# Units that say nothing about whose work it is: a login session, a user's manager, cron,
# the container runtimes themselves, transient `systemd-run` units.
_GENERIC_UNIT = re.compile(
    r"(?:session-\w+\.scope|user@\d+\.service|init\.scope|run-[a-z0-9]+\.(?:scope|service)"
    r"|(?:cron|crond|ssh|sshd|containerd|docker|kubelet|slurmd|slurmstepd|systemd-[a-z-]+"
    r"|(?:serial-)?getty@[\w.-]*)\.(?:service|scope))")
# What a Slurm prolog may write: names as Slurm allows them, bounded.
_SLURM_VALUE = re.compile(r"[A-Za-z0-9._+-]{1,64}")


def cgroup_paths(text: str) -> list[str]:
    """The cgroup paths of a /proc/PID/cgroup text, most telling first: the v2 (unified) path,
    then v1's name=systemd, then the other v1 controllers. Malformed lines are skipped."""
    unified, named, others = [], [], []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            unified.append(path)
        elif controllers == "name=systemd":
            named.append(path)
        else:
            others.append(path)
    seen: set[str] = set()
    ordered = []
    for path in unified + named + others:
        if path != "/" and path not in seen:
            seen.add(path)
            ordered.append(path)
    return ordered


def owner_from_path(path: str) -> dict[str, str]:
    """What one cgroup path says: pod_uid and container_id, slurm_job and slurm_step, or
    systemd_unit (only outside pods and Slurm jobs, where the unit is the owner)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    owner: dict[str, str] = {}
    if any(p == "user.slice" or p.startswith("user@") for p in parts):
        # A user's systemd manager may make cgroups of any name below its own (delegation):
        # a pod or a Slurm job there would be whatever its user claims. Only its unit counts.
        units = [p for p in parts if p.endswith((".service", ".scope")) and _UNIT.fullmatch(p)]
        return {"systemd_unit": units[-1]} if units else {}
    in_pods = "kubepods" in path
    # Substring tests before each pattern: this runs for every new process at discovery.
    for i, part in enumerate(parts):
        if in_pods and "pod_uid" not in owner and "pod" in part:
            for match in _POD.finditer(part):
                uid = match.group(1).replace("_", "-").strip("-")
                if len(uid) >= _POD_UID_MIN:
                    owner["pod_uid"] = uid
                    break
        scope = _CONTAINER_SCOPE.fullmatch(part) if part.endswith(".scope") else None
        if scope:
            owner["container_id"] = scope.group(1)
        elif "pod_uid" in owner and len(part) == 64 and _CONTAINER_ID.fullmatch(part):
            owner["container_id"] = part  # cgroupfs driver: kubepods/burstable/pod<uid>/<id>
        elif (part == "docker" and i + 1 < len(parts) and _CONTAINER_ID.fullmatch(parts[i + 1])):
            owner["container_id"] = parts[i + 1]  # plain Docker, cgroupfs driver
        if part.startswith("job_"):
            job = _SLURM_JOB.fullmatch(part)
            if job and i > 0 and (parts[i - 1] == "slurmstepd.scope"
                                  or parts[i - 1].startswith("uid_") or "slurm" in parts[:i]):
                owner["slurm_job"] = job.group(1)
        elif part.startswith("step_") and "slurm_job" in owner:
            step = _SLURM_STEP.fullmatch(part)
            if step:
                owner["slurm_step"] = step.group(1)
    if "pod_uid" in owner or "slurm_job" in owner or "container_id" in owner:
        return owner
    units = [p for p in parts if p.endswith((".service", ".scope")) and _UNIT.fullmatch(p)]
    if units:
        owner["systemd_unit"] = units[-1]
    return owner


def parse_cgroup(text: str) -> dict[str, str]:
    """The owner a /proc/PID/cgroup text names (cgroup v1 or v2); {} when it names none.
    The first path that names a pod, a container or a Slurm job wins; else the first with a
    systemd unit."""
    fallback: dict[str, str] = {}
    for path in cgroup_paths(text):
        owner = owner_from_path(path)
        if owner.keys() & {"pod_uid", "container_id", "slurm_job"}:
            return owner
        if owner and not fallback:
            fallback = owner
    return fallback


def read_bounded(path: str, limit: int) -> bytes:
    """At most `limit` bytes of a file (a /proc file or one a prolog wrote)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def parse_slurm_info(text: str) -> dict[str, str]:
    """A prolog-written job file: `key=value` lines; `account` and `partition` are kept when
    their values look like Slurm names; anything else (other keys, bad values, comments) is
    ignored. -> {"slurm_account": ..., "slurm_partition": ...}"""
    info: dict[str, str] = {}
    for line in text.splitlines()[:32]:
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if sep and key in SLURM_INFO_KEYS and _SLURM_VALUE.fullmatch(value):
            info[f"slurm_{key}"] = value
    return info


def read_slurm_info(folder: str, job: str) -> dict[str, str]:
    """The job file `<folder>/<job id>` a prolog wrote, if it is there and trustworthy: a
    regular file (not a link) owned by root or by us, that no one else can write. Untrusted
    otherwise, and then ignored ({})."""
    if not job.isdigit():
        return {}
    path = os.path.join(folder, job)
    try:
        st = os.lstat(path)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid())
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            return {}
        data = read_bounded(path, SLURM_INFO_MAX_BYTES)
    except OSError:
        return {}
    return parse_slurm_info(data.decode("utf-8", "replace"))


def workload_label(owner: Mapping[str, str]) -> str | None:
    """The short owner label a screen shows: "namespace/pod", else "pod <uid8>", else
    "slurm <job>", else a systemd unit that is not a generic one, else None."""
    if owner.get("pod") and owner.get("namespace"):
        return f"{owner['namespace']}/{owner['pod']}"
    if owner.get("pod_uid"):
        return f"pod {owner['pod_uid'][:8]}"
    if owner.get("slurm_job"):
        return f"slurm {owner['slurm_job']}"
    unit = owner.get("systemd_unit")
    if unit and not _GENERIC_UNIT.fullmatch(unit):
        return unit
    return None


POD_CACHE = 4096  # pods and containers remembered (a node runs at most a few hundred pods)


class OwnerReader:
    """Reads a process's owner once: its cgroup, plus the Slurm job file when configured, plus
    the pod's name, namespace and container from the kubelet's pod-resources API (by the GPUs
    the process holds) where its socket is mounted. A pod's name, once learned from a GPU
    process, also names its other processes (DataLoader workers hold no GPU). Never raises: an
    unreadable or odd cgroup file is an empty owner."""

    def __init__(self, slurm_job_info_dir: str = "", proc_root: str = "/proc",
                 pod_resources: PodResources | None = None) -> None:
        self.slurm_job_info_dir = slurm_job_info_dir
        self.proc_root = proc_root
        self.pod_resources = pod_resources
        self._pods: dict[str, tuple[str, str]] = {}  # pod UID -> (namespace, pod)
        self._containers: dict[str, str] = {}  # container id -> container name

    def owner_of(self, pid: int, devices: tuple[str, ...] = ()) -> dict[str, str]:
        """The owner of `pid`, which holds the GPUs whose UUIDs are `devices`."""
        try:
            data = read_bounded(f"{self.proc_root}/{pid}/cgroup", CGROUP_MAX_BYTES)
        except OSError:
            return {}
        owner = parse_cgroup(data.decode("utf-8", "replace"))
        if self.slurm_job_info_dir and "slurm_job" in owner:
            owner.update(read_slurm_info(self.slurm_job_info_dir, owner["slurm_job"]))
        if "pod_uid" in owner:
            self._name_pod(owner, devices)
        return shown_owner(owner)

    def _name_pod(self, owner: dict[str, str], devices: tuple[str, ...]) -> None:
        uid, container_id = owner["pod_uid"], owner.get("container_id")
        if uid not in self._pods and devices and self.pod_resources is not None:
            candidates = self.pod_resources.candidates(devices)
            allocation = next(iter(candidates)) if len(candidates) == 1 else None
            namespaces = {c.namespace for c in candidates}
            if allocation is None and len(namespaces) == 1:
                # a GPU time-sliced between pods of one namespace: the namespace is certain, the
                # pod is not (the kubelet does not say which replica a process uses)
                owner["namespace"] = namespaces.pop()
            if allocation is not None:
                if len(self._pods) >= POD_CACHE:
                    self._pods.clear()
                    self._containers.clear()
                self._pods[uid] = (allocation.namespace, allocation.pod)
                if container_id:
                    self._containers[container_id] = allocation.container
        if uid in self._pods:
            owner["namespace"], owner["pod"] = self._pods[uid]
            if container_id and container_id in self._containers:
                owner["container"] = self._containers[container_id]


def shown_owner(owner: Mapping[str, str]) -> dict[str, str]:
    """An owner with each value as mlcostd may show it: control bytes shown, a secret hidden
    (daemon.sources.redact.redact_name). A pod, namespace, container, unit or Slurm account is
    named by whoever started it (a pod named like an API key, a unit `ghp_....service`), and the
    owner is in /v1/now, every /metrics label of its workload, the store and reports. A name
    keys a workload (its ledger job, its series): one that had something hidden keeps a tag of
    it, so two pods named like two keys stay two workloads."""
    return {key: redact_name(one_line(value)) for key, value in owner.items()}


def encode_owner(owner: Mapping[str, str]) -> str | None:
    """An owner as the store keeps it: compact JSON with sorted keys, None when empty."""
    return json.dumps(dict(owner), sort_keys=True, separators=(",", ":")) if owner else None


def decode_owner(text: str | None) -> dict[str, str]:
    """The store's owner column back as a dict; anything that is not a JSON object of strings
    reads as empty (a file written by hand, a future format)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    # (redacted on its way out: a store from before owners were, or edited)
    return shown_owner({str(k): v for k, v in value.items() if isinstance(v, str)})
