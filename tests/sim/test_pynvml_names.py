"""The pynvml names the simulator and the NVML source rely on exist in the installed
nvidia-ml-py (pyproject pins a range; a release that renames one fails here, not on a GPU host).

Names are collected from the code itself (every `pynvml.NAME` and every C symbol string), so a
new use is checked without editing this test.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pynvml
import pytest

from daemon.sim import nvml as sim_nvml

ROOT = Path(__file__).resolve().parents[2]
USERS = [
    "daemon/sim/nvml.py",
    "daemon/sources/nvml.py",
    "daemon/sources/nvml_query.py",
    "daemon/commands/check.py",
]
# The C symbols pynvml looks up: _nvmlGetFunctionPointer("nvml...").
PYNVML_SYMBOLS = set(re.findall(r'_nvmlGetFunctionPointer\(\s*"(nvml\w+)"',
                                inspect.getsource(pynvml)))


def _answered_by_simulator() -> set[str]:
    return {name for name, _ in inspect.getmembers(sim_nvml._Symbols)
            if re.fullmatch(r"nvml[A-Z]\w+", name)}


def _pynvml_attributes(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "pynvml"}


def _symbol_strings(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"nvml[A-Z]\w+", node.value)}


def test_pynvml_symbols_were_found():
    assert len(PYNVML_SYMBOLS) > 200, "pynvml's symbol lookups changed shape; update this test"


@pytest.mark.parametrize("path", USERS)
def test_every_pynvml_name_used_exists(path):
    used = _pynvml_attributes(path)
    assert used, f"{path} uses no pynvml name: is the list of users out of date?"
    missing = sorted(name for name in used if not hasattr(pynvml, name))
    assert not missing, f"{path} uses pynvml names this nvidia-ml-py lacks: {missing}"


@pytest.mark.parametrize("path", ["daemon/sources/nvml.py", "daemon/commands/check.py"])
def test_every_c_symbol_named_is_resolved_by_pynvml_or_answered_by_the_simulator(path):
    """A symbol we resolve ourselves (the unversioned process query) must at least be one the
    simulator answers, so the tests run that path."""
    missing = sorted(_symbol_strings(path) - PYNVML_SYMBOLS - _answered_by_simulator())
    assert not missing, f"{path} names C symbols nobody resolves: {missing}"


def test_struct_versions_the_simulator_fills_exist():
    for name in ("c_nvmlProcessInfo_v2_t", "c_nvmlProcessUtilizationSample_t", "nvmlMemory_v2",
                 "c_nvmlGpmMetricsGet_t", "NVML_GPM_METRICS_GET_VERSION"):
        assert hasattr(pynvml, name), name
