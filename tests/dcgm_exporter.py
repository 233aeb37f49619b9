"""A local dcgm-exporter for the tests: a real aiohttp server on 127.0.0.1 (its own event loop
in a thread, so blocking clients can read it) serving dcgm-exporter's text format: the fields and
labels dcgm-exporter writes (`gpu`, `UUID`, `device`, `modelName`, `Hostname`,
`DCGM_FI_DRIVER_VERSION`, and `pod`/`namespace`/`container` where a pod holds the GPU)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from aiohttp import web

HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp "
                               "assigned."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is "
                                        "active."),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is "
                                 "active sending or receiving data."),
}


def exposition(gpus: Mapping[str, Mapping[str, float]], model: str = "NVIDIA H100 80GB HBM3",
               pods: Mapping[str, tuple[str, str, str]] | None = None) -> str:
    """dcgm-exporter's /metrics for {UUID: {field: value}} (GPU i is the i-th UUID)."""
    lines = []
    for field, (kind, text) in HELP.items():
        rows = [(i, uuid, values[field]) for i, (uuid, values) in enumerate(gpus.items())
                if field in values]
        if not rows:
            continue
        lines += [f"# HELP {field} {text}", f"# TYPE {field} {kind}"]
        for index, uuid, value in rows:
            labels = (f'gpu="{index}",UUID="{uuid}",device="nvidia{index}",modelName="{model}",'
                      f'Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="550.54.15"')
            if pods and uuid in pods:
                namespace, pod, container = pods[uuid]
                labels += f',container="{container}",namespace="{namespace}",pod="{pod}"'
            lines.append(f"{field}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


class DcgmExporter:
    """The server's state: the body it serves (change `body` to change the answer) and how
    many scrapes it answered."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.scrapes = 0
        self.url = ""

    async def metrics(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        return web.Response(text=self.body, content_type="text/plain")


@contextmanager
def dcgm_exporter(body: str) -> Iterator[DcgmExporter]:
    """Serve `body` at http://127.0.0.1:PORT/metrics until the block ends."""
    exporter = DcgmExporter(body)
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/metrics", exporter.metrics)
    runner = web.AppRunner(app)

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        exporter.url = f"http://127.0.0.1:{port}/metrics"

    thread = threading.Thread(target=loop.run_forever, name="dcgm-exporter-test", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield exporter
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
