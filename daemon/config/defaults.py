"""The default config as TOML with a comment per key: what `mlcostd config` prints and the
README shows, made from the sections' fields so it cannot drift from them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from daemon.config.sections import SECTIONS
from daemon.config.values import format_duration


def describe_defaults() -> str:
    """The default config as TOML with a comment per key, for `mlcostd config` and the README."""
    lines = []
    for name, cls in SECTIONS.items():
        lines.append(f"[{name}]")
        for f in dataclasses.fields(cls):
            factory: Any = f.default_factory  # set wherever a field has no plain default
            default = f.default if f.default is not dataclasses.MISSING else factory()
            kind = f.metadata["kind"]
            if kind == "duration":
                shown = f'"{format_duration(default)}"'
            elif kind == "size":
                shown = f'"{default >> 20}MiB"'
            elif f.metadata["kind"] in ("table", "list", "tables"):
                shown = "{}" if f.metadata["kind"] == "table" else "[]"
            elif isinstance(default, bool):
                shown = "true" if default else "false"
            elif isinstance(default, str):
                shown = f'"{default}"'
            else:
                shown = f"{default:g}" if isinstance(default, float) else str(default)
            lines.append(f"{f.name} = {shown}  # {f.metadata['help']}")
        lines.append("")
    return "\n".join(lines)
