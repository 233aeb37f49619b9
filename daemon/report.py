"""`mlcostd report`: what the host did over a window, as a JSON document and as text.

The JSON document is a contract (documented in the README): top-level `host`, `window`,
`gpus` and `processes`; later features add keys, never rename them.
"""

from __future__ import annotations

import time
from typing import Any

from daemon.store import StoreReader

REPORT_VERSION = 1


def build(reader: StoreReader, since_s: float, until: float | None = None) -> dict[str, Any]:
    """The report over the last `since_s` seconds (ending now, or at `until`)."""
    end = until if until is not None else time.time()
    summary = reader.window_summary(end - since_s, end)
    host = dict(reader.meta("host") or {})
    latest = reader.latest()
    host["nvml_status"] = latest.nvml_status if latest else None
    host["last_sample_at"] = latest.ts if latest else None
    return {
        "version": REPORT_VERSION,
        "host": host,
        "window": summary["window"],
        "gpus": summary["gpus"],
        "processes": summary["processes"],
    }


def _bytes(value: float | int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{int(value)} B"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _num(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return lines


def short_command(command: str) -> str:
    """'/opt/venv/bin/python3 -m pkg.train --x 1' -> 'python3 -m pkg.train --x 1'."""
    head, _, rest = command.partition(" ")
    return (head.rsplit("/", 1)[-1] + (" " + rest if rest else "")) if head else command


def render_text(report: dict[str, Any], width: int = 120) -> str:
    """The report for a terminal."""
    host = report["host"]
    window = report["window"]
    out = []
    title = f"mlcost report: {host.get('hostname', '?')}"
    if host.get("simulated"):
        title += f" (simulated host, scenario {host['simulated']!r})"
    out.append(title)
    instance = host.get("instance") or {}
    if instance.get("type"):
        out.append(f"instance: {instance.get('provider')} {instance['type']} in "
                   f"{instance.get('region')} ({instance.get('lifecycle')})")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(window["since"]))
    until = time.strftime("%H:%M:%S", time.localtime(window["until"]))
    out.append(f"window: {since} to {until}, {window['ticks']} samples")
    if host.get("nvml_status") not in (None, "ok"):
        out.append(f"NVML: {host['nvml_status']}")
    if not window["ticks"]:
        out.append("")
        out.append("No samples in this window. Is mlcostd running? Try a longer --since.")
        return "\n".join(out) + "\n"
    out.append("")
    out.append("GPUs")
    rows = []
    for gpu in report["gpus"]:
        memory = f"{_bytes(gpu['memory_used_bytes'])} / {_bytes(gpu['memory_total_bytes'])}"
        status = gpu.get("status") or "ok"
        rows.append([str(gpu["index"]), gpu["name"], _pct(gpu["utilization"]),
                     _pct(gpu.get("sm_activity")), memory, _num(gpu["power_watts"], " W"),
                     status if status == "ok" else f"{status}"])
    out += ["  " + line for line in _table(
        ["GPU", "model", "util", "SM", "memory", "power", "status"], rows)]
    out.append("")
    out.append("Processes (GPU processes and their workers)")
    rows = []
    for proc in report["processes"]:
        command = short_command(proc["command"])
        if len(command) > 48:
            command = command[:47] + "…"
        gpus = ",".join(str(g) for g in proc["gpus"]) or "-"
        rows.append([str(proc["pid"]), proc["user"], gpus, _bytes(proc["gpu_memory_bytes"]),
                     _pct(proc["sm_share"]) if proc["gpus"] else "-",
                     _pct(proc["cpu_percent"]), _bytes(proc["rss_bytes"]),
                     _bytes(proc["read_bytes"]), _num(proc["io_wait_seconds"], " s", 1),
                     command])
    if rows:
        out += ["  " + line for line in _table(
            ["PID", "user", "GPUs", "GPU mem", "SM", "CPU", "RSS", "read", "I/O wait",
             "command"], rows)]
    else:
        out.append("  no process used a GPU in this window")
    return "\n".join(line[:width] for line in out) + "\n"
