"""Who owns a process, from /proc/PID/cgroup texts of each kind (tests/daemon/fixtures/cgroups)
and the Slurm prolog's job file; never from the process's environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daemon.sources import owners
from daemon.sources.owners import OwnerReader, parse_cgroup, parse_slurm_info, workload_label

CGROUPS = Path(__file__).parent / "fixtures" / "cgroups"
POD_UID = "8e3b1a2c-4f5d-4e6a-9b7c-1d2e3f4a5b6c"
TRAINER = "06ea17a8981d25b0315ff17bd1ebad3d95c15a3f8b764eaadb93612d9b61a54e"
CRIO = "c64064614423cb790e88b3e5492ff5ccf673b25ae823089f7a60c65cda24d809"
DOCKER = "d548c5b83fa61d8e3bd86ad42a7ffea9b7c86e3f9d8095c1577d3e1270bb9420"
PLAIN = "a116c9ed46d6207734a43317d30fd88f52ac8634c37d904bbf4e41d865f90475"

EXPECTED = {
    "containerd-v2-systemd-driver": {"pod_uid": POD_UID, "container_id": TRAINER},
    "containerd-v1-cgroupfs-driver": {"pod_uid": POD_UID, "container_id": TRAINER},
    "crio-v2-guaranteed": {"pod_uid": POD_UID, "container_id": CRIO},
    # conmon watches the container from the pod's cgroup: the pod, but not the container
    "crio-conmon-v2": {"pod_uid": POD_UID},
    "docker-v1-systemd-driver": {"pod_uid": POD_UID, "container_id": DOCKER},
    "static-pod-v1-cgroupfs": {
        "pod_uid": "2053dbbf6ec7135c4e994d3464c478db",
        "container_id": "c38cbd92fce41312f3fbdce60510013b7f0d4004a03b45c8e762f98f1ed4006c"},
    "docker-plain-v2": {"container_id": PLAIN},
    "docker-plain-v1-cgroupfs": {"container_id": PLAIN},
    "slurm-v2": {"slurm_job": "4242", "slurm_step": "0"},
    "slurm-v2-batch": {"slurm_job": "4243", "slurm_step": "batch"},
    "slurm-v1": {"slurm_job": "1234", "slurm_step": "3"},
    "systemd-service-v2": {"systemd_unit": "vllm-server.service"},
    "systemd-service-v1": {"systemd_unit": "jupyterhub.service"},
    "systemd-session-v2": {"systemd_unit": "session-3.scope"},
    "systemd-user-manager-v2": {"systemd_unit": "train-llm.service"},
    "systemd-user-manager-init-v2": {"systemd_unit": "init.scope"},
    "root-v2": {},
}

WORKLOADS = {
    "containerd-v2-systemd-driver": "pod 8e3b1a2c",
    "docker-plain-v2": None,
    "slurm-v1": "slurm 1234",
    "systemd-service-v2": "vllm-server.service",
    "systemd-user-manager-v2": "train-llm.service",
    # a login session, a user's manager: nobody's job in particular
    "systemd-session-v2": None,
    "systemd-user-manager-init-v2": None,
    "root-v2": None,
}


def test_every_recorded_cgroup_kind_has_a_fixture_and_an_expectation():
    assert sorted(p.stem for p in CGROUPS.glob("*.cgroup")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_owner_of_each_recorded_cgroup(name):
    assert parse_cgroup((CGROUPS / f"{name}.cgroup").read_text()) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_workload_label_of_each_recorded_cgroup(name):
    owner = parse_cgroup((CGROUPS / f"{name}.cgroup").read_text())
    assert workload_label(owner) == WORKLOADS[name]


def test_a_pod_with_its_name_and_namespace_is_labelled_namespace_slash_pod():
    assert workload_label({"pod_uid": POD_UID, "pod": "trainer-0", "namespace": "ml"}) == \
        "ml/trainer-0"


def test_a_short_pod_match_is_not_a_pod_uid():
    # "pod" followed by too few hex characters is some other name, not a UID
    assert parse_cgroup("0::/kubepods.slice/kubepods-podcafe.slice/x.scope\n") == {
        "systemd_unit": "x.scope"}
    assert parse_cgroup("0::/system.slice/pod1234abcd.service\n") == {
        "systemd_unit": "pod1234abcd.service"}


@pytest.mark.parametrize("spoof", [
    f"kubepods/burstable/pod{POD_UID}/{TRAINER}",
    "slurm/uid_0/job_1234/step_0",
    "system.slice/slurmstepd.scope/job_1234/step_0",
])
def test_a_user_cannot_claim_a_pod_or_a_slurm_job_from_its_delegated_cgroups(spoof):
    # systemd delegates user@UID.service's subtree to that user, who may name cgroups freely
    text = f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope/{spoof}\n"
    owner = parse_cgroup(text)
    assert set(owner) == {"systemd_unit"}
    assert workload_label(owner) in (None, "x.scope")


def test_garbage_lines_are_skipped_not_raised():
    text = "nonsense\n::\n7:cpu\n\x00\x01\n0::relative/path\n" + "x" * 10000 + "\n"
    assert parse_cgroup(text) == {}


def test_a_slurm_job_deeper_than_a_unit_wins_over_the_v1_systemd_line():
    # cgroup v1 Slurm: name=systemd says slurmd.service, the controllers say the job
    assert parse_cgroup((CGROUPS / "slurm-v1.cgroup").read_text())["slurm_job"] == "1234"


def test_slurm_info_keeps_account_and_partition_and_nothing_else():
    text = ("# written by the prolog\naccount=physics\npartition=gpu-a100\n"
            "user=alice\nsecret=hunter2\n")
    assert parse_slurm_info(text) == {"slurm_account": "physics",
                                      "slurm_partition": "gpu-a100"}


@pytest.mark.parametrize("value", ["", "a b", "x" * 65, "$(rm -rf /)", "../etc", "é"])
def test_slurm_info_values_that_are_not_slurm_names_are_dropped(value):
    assert parse_slurm_info(f"account={value}\n") == {}


def _proc_tree(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)
    # an environment the reader must never open
    (root / str(pid) / "environ").write_text("SLURM_JOB_ACCOUNT=from-environ\0")


def test_the_reader_adds_the_prolog_file_to_a_slurm_job(tmp_path):
    _proc_tree(tmp_path / "proc", 10, (CGROUPS / "slurm-v2.cgroup").read_text())
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "4242").write_text("account=physics\npartition=gpu\n")
    os.chmod(jobs / "4242", 0o644)
    reader = OwnerReader(str(jobs), proc_root=str(tmp_path / "proc"))
    assert reader.owner_of(10) == {"slurm_job": "4242", "slurm_step": "0",
                                   "slurm_account": "physics", "slurm_partition": "gpu"}


def test_the_reader_ignores_a_job_file_others_can_write_or_a_link(tmp_path):
    _proc_tree(tmp_path / "proc", 10, (CGROUPS / "slurm-v2.cgroup").read_text())
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "real").write_text("account=physics\n")
    (jobs / "4242").symlink_to(jobs / "real")
    reader = OwnerReader(str(jobs), proc_root=str(tmp_path / "proc"))
    assert "slurm_account" not in reader.owner_of(10)
    (jobs / "4242").unlink()
    (jobs / "4242").write_text("account=physics\n")
    os.chmod(jobs / "4242", 0o666)
    assert "slurm_account" not in reader.owner_of(10)


def test_the_reader_reads_a_bounded_amount(tmp_path, monkeypatch):
    _proc_tree(tmp_path / "proc", 10, "0::/" + "a/" * 100_000 + "x.service\n")
    reads = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(owners.os, "read", counting_read)
    assert OwnerReader(proc_root=str(tmp_path / "proc")).owner_of(10) == {}
    assert sum(reads) == owners.CGROUP_MAX_BYTES


def test_the_reader_never_opens_environ(tmp_path, monkeypatch):
    _proc_tree(tmp_path / "proc", 10, (CGROUPS / "slurm-v2.cgroup").read_text())
    opened = []
    real_open = os.open
    monkeypatch.setattr(owners.os, "open",
                        lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    OwnerReader(proc_root=str(tmp_path / "proc")).owner_of(10)
    assert opened == [f"{tmp_path}/proc/10/cgroup"]


def test_a_gone_process_has_no_owner(tmp_path):
    assert OwnerReader(proc_root=str(tmp_path)).owner_of(999999) == {}


def test_this_process_real_cgroup_parses():
    # whatever this host is, its own cgroup file parses without error
    assert isinstance(OwnerReader().owner_of(os.getpid()), dict)
