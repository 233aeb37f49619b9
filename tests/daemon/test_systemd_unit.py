"""deploy/systemd/mlcostd.service: valid for systemd (`systemd-analyze verify`), private files
(UMask=0077, 0700 state and runtime folders where mlcostd's defaults put the store and the
socket), and the sandbox that does not break NVML or py-spy. `systemd-analyze security` rates
it; the figure is printed (run with -s to see it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from daemon import config as config_module

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "mlcostd.service"
REQUIRED = {
    "Type": "notify", "UMask": "0077", "StateDirectory": "mlcost", "StateDirectoryMode": "0700",
    "RuntimeDirectory": "mlcost", "RuntimeDirectoryMode": "0700", "ProtectSystem": "strict",
    "ProtectHome": "read-only", "PrivateTmp": "yes", "NoNewPrivileges": "yes",
}
# Each of these breaks NVML (/dev/nvidia*), the process source (/proc of every process) or
# py-spy (ptrace, setns, the target's files under /home): see the unit's header.
BREAKS_THE_RECORDER = ("PrivateDevices", "ProcSubset", "ProtectProc", "RestrictNamespaces",
                       "SystemCallFilter", "DevicePolicy", "CapabilityBoundingSet")


def settings() -> dict[str, str]:
    found = {}
    for line in UNIT.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            found[key.strip()] = value.strip()
    return found


@pytest.fixture
def runnable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's mlcostd (verify checks it exists)."""
    text = re.sub(r"^ExecStart=.*$", f"ExecStart={sys.executable} -m daemon run",
                  UNIT.read_text(), flags=re.M)
    path = tmp_path / "mlcostd.service"
    path.write_text(text)
    return path


def test_the_unit_verifies_clean(runnable_unit):
    done = subprocess.run(["systemd-analyze", "verify", str(runnable_unit)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "mlcostd.service" not in done.stderr, done.stderr  # no warning about our unit


def test_the_unit_keeps_files_private_and_sandboxes_without_breaking_nvml_or_py_spy():
    found = settings()
    for key, value in REQUIRED.items():
        assert found.get(key) == value, f"{key}={found.get(key)!r}, want {value!r}"
    assert not set(BREAKS_THE_RECORDER) & set(found), set(BREAKS_THE_RECORDER) & set(found)
    assert found.get("User", "root") == "root"  # NVML per-process data, py-spy, /proc/PID/io


def test_mlcostds_root_defaults_are_the_units_folders():
    assert config_module.default_db_path().parent == Path("/var/lib") / REQUIRED["StateDirectory"]
    assert config_module.default_socket_path().parent == (
        Path("/run") / REQUIRED["RuntimeDirectory"])


def test_systemd_analyze_security_rates_the_unit(runnable_unit, capsys):
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(runnable_unit)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    exposure = re.search(r"Overall exposure level for mlcostd.service: ([\d.]+) (\w+)",
                         done.stdout)
    assert exposure, done.stdout[-2000:]
    for passed in ("UMask=", "NoNewPrivileges=", "PrivateTmp=", "ProtectSystem=",
                   "ProtectKernelLogs=", "SystemCallArchitectures="):
        assert re.search(rf"✓ {re.escape(passed)}", done.stdout), passed
    assert re.search(r"ProtectHome=\s+Service has read-only access", done.stdout)
    with capsys.disabled():
        print(f"\nsystemd-analyze security: exposure {exposure.group(1)} ({exposure.group(2)})")


def test_verify_catches_a_bad_value(runnable_unit):
    """The check above can fail: systemd-analyze names a value it cannot parse."""
    runnable_unit.write_text(runnable_unit.read_text().replace("Type=notify", "Type=notifyy"))
    done = subprocess.run(["systemd-analyze", "verify", str(runnable_unit)],
                          capture_output=True, text=True, timeout=60)
    assert "Failed to parse service type" in done.stdout + done.stderr


def test_readme_says_the_unit_ships_without_metrics_listen_and_shows_the_line_to_add():
    """README said the unit "with `--metrics-listen` in `ExecStart` does the same", but the
    shipped ExecStart has no such flag: it shows the drop-in that adds it, which must stay
    the shipped ExecStart plus the flag."""
    readme = (UNIT.parents[2] / "README.md").read_text()
    shipped = settings()["ExecStart"]
    assert "--metrics-listen" not in shipped
    assert f"`ExecStart={shipped}`" in readme
    assert f"ExecStart=\nExecStart={shipped} --metrics-listen 0.0.0.0:9400\n" in readme
