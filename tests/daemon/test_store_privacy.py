"""Only daemon/store touches a Store's private state (its connection, lock, caches).

A simple rule, checked over every module outside daemon/store (the daemon, the TUI, pricing,
tests, benchmarks, scripts): no `<x>._<name>` where `<x>` is a name or attribute called `store`
(`store._lock`, `self.store._processes`). What other code needs from a Store is a public method.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("daemon", "mlcost_tui", "pricing", "tests", "bench", "scripts")


def _modules() -> list[Path]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if (ROOT / "daemon" / "store") not in path.parents:
                found.append(path)
    return found


def _is_store(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "store") or (
        isinstance(node, ast.Attribute) and node.attr == "store")


def private_store_accesses(source: str, filename: str) -> list[str]:
    """'file:line store._name' for each private attribute of a Store variable in `source`."""
    tree = ast.parse(source, filename=filename)
    return [f"{filename}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__") and _is_store(node.value)]


def test_the_rule_sees_private_store_accesses():
    source = "store._lock.acquire()\nself.store._processes.get(1)\nstore.write(s)\n"
    assert private_store_accesses(source, "x.py") == [
        "x.py:1 store._lock", "x.py:2 self.store._processes"]


def test_nothing_outside_the_store_package_touches_a_stores_private_state():
    modules = _modules()
    assert len(modules) > 50, "the folders above moved: this test would check nothing"
    found = [hit for path in modules
             for hit in private_store_accesses(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "give Store a public method instead:\n" + "\n".join(found)
