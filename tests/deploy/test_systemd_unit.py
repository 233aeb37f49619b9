"""deploy/systemd/mlcostd.service passes `systemd-analyze verify` with nothing to say (it
prints a bad value and still exits 0: any output is a failure), with ExecStart pointed at the
mlcostd the tests run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "mlcostd.service"
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"


def verify(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    mlcostd = shutil.which("mlcostd", path=str(Path(sys.executable).parent))
    assert mlcostd, "the mlcostd console script beside the tests' python"
    installed = text.replace("ExecStart=/usr/local/bin/mlcostd", f"ExecStart={mlcostd}")
    unit = tmp_path / "mlcostd.service"
    unit.write_text(installed)
    return subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)


def test_the_unit_verifies_cleanly(tmp_path):
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/mlcostd run" in text and "Type=notify" in text
    checked = verify(tmp_path, text)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), \
        checked.stdout + checked.stderr


def test_verify_catches_a_bad_value(tmp_path):
    checked = verify(tmp_path, UNIT.read_text().replace("Type=notify", "Type=notifyy"))
    assert "Failed to parse service type" in checked.stdout + checked.stderr
