"""Load a page in headless Chromium (Debian's `chromium`, installed by .ci/run) through the
DevTools protocol: what the console and the page's exceptions said, what a script reads from
the DOM, and a PNG screenshot.

One fresh browser per call, its own profile folder, port 0 (Chromium picks a free port and
writes it to DevToolsActivePort), no network features; it is killed by its pid at the end.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from lifeline import kill_group, spawn_options

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]
START_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 60.0
MIN_WINDOW_WIDTH = 500  # narrower: the viewport is emulated (Emulation.setDeviceMetricsOverride)


@dataclass
class Page:
    console_errors: list[str] = field(default_factory=list)  # console.error, exceptions, logs
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    value: Any = None  # what `script` returned
    screenshot: Path | None = None


def load(url: str, script: str, screenshot: Path | None = None,
         size: tuple[int, int] = (1000, 2400)) -> Page:
    """Open `url`, wait for its load event, evaluate `script` (an expression whose value is
    JSON-serialisable), take a full-page screenshot when asked."""
    profile = Path(tempfile.mkdtemp(prefix="mlcost-chromium-"))
    # Its singleton socket's folder goes in $TMPDIR, and a killed browser leaves it behind.
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}",
                             f"--window-size={size[0]},{size[1]}", "about:blank"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, TMPDIR=str(profile)),
                            **spawn_options())
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {proc.returncode} before it listened")
            if time.monotonic() > deadline:
                raise RuntimeError(f"chromium wrote no {port_file} within {START_TIMEOUT_S} s")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        # (headless Chromium keeps a window at least 500 px wide: a phone's width is set on
        # the page's viewport, as DevTools' device mode does)
        return asyncio.run(_drive(port, url, script, screenshot,
                                  size if size[0] < MIN_WINDOW_WIDTH else None))
    finally:
        proc.kill()
        proc.wait(30)
        kill_group(proc.pid)  # its renderers and zygotes
        shutil.rmtree(profile, ignore_errors=True)


async def _drive(port: int, url: str, script: str, screenshot: Path | None,
                 viewport: tuple[int, int] | None = None) -> Page:
    page = Page()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json(content_type=None)
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        async with session.ws_connect(ws_url, max_msg_size=0) as ws:
            ids = iter(range(1, 1 << 30))
            answers: dict[int, asyncio.Future[Any]] = {}
            loaded = asyncio.get_running_loop().create_future()

            async def reader() -> None:
                async for message in ws:
                    data = json.loads(message.data)
                    if "id" in data and data["id"] in answers:
                        answers.pop(data["id"]).set_result(data)
                        continue
                    method, params = data.get("method"), data.get("params", {})
                    if method == "Runtime.consoleAPICalled" and params.get("type") in (
                            "error", "assert", "warning"):
                        page.console_errors.append(" ".join(
                            str(a.get("value", a.get("description", ""))) for a in
                            params.get("args", [])))
                    elif method == "Runtime.exceptionThrown":
                        page.console_errors.append(json.dumps(params.get("exceptionDetails")))
                    elif method == "Log.entryAdded" and params["entry"]["level"] in (
                            "error", "warning"):
                        page.console_errors.append(params["entry"].get("text", ""))
                    elif method == "Network.requestWillBeSent":
                        page.requests.append(params["request"]["url"])
                    elif method == "Page.loadEventFired" and not loaded.done():
                        loaded.set_result(True)

            async def call(method: str, **params: Any) -> Any:
                ident = next(ids)
                answers[ident] = asyncio.get_running_loop().create_future()
                await ws.send_json({"id": ident, "method": method, "params": params})
                answer = await asyncio.wait_for(answers[ident], LOAD_TIMEOUT_S)
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

            task = asyncio.create_task(reader())
            try:
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await call(f"{domain}.enable")
                if viewport is not None:
                    await call("Emulation.setDeviceMetricsOverride", width=viewport[0],
                               height=viewport[1], deviceScaleFactor=1, mobile=False)
                await call("Page.navigate", url=url)
                await asyncio.wait_for(loaded, LOAD_TIMEOUT_S)
                # Late console messages of the load: the answer to this comes once the page's
                # queued tasks and its next frame have run, after the events they raised (CDP
                # keeps their order), however slow the host.
                await call("Runtime.evaluate", awaitPromise=True, expression=(
                    "new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)))"))
                result = await call("Runtime.evaluate", expression=f"JSON.stringify({script})",
                                    returnByValue=True)
                page.value = json.loads(result["result"]["value"])
                if screenshot is not None:
                    shot = await call("Page.captureScreenshot", format="png",
                                      captureBeyondViewport=True)
                    screenshot.write_bytes(base64.b64decode(shot["data"]))
                    page.screenshot = screenshot
            finally:
                task.cancel()
    return page


# What the report's charts hold, read back from the DOM: per chart, each series' declared and
# drawn point count (a polyline's points, or a timeline row's bars).
CHARTS_SCRIPT = """[...document.querySelectorAll('svg.chart')].map(svg => ({
  chart: svg.dataset.chart, declared: +svg.dataset.series,
  series: [...svg.querySelectorAll('.series')].map(s => ({
    name: s.dataset.series, declared: +s.dataset.points,
    drawn: s.points ? s.points.numberOfItems : s.querySelectorAll('rect').length}))}))"""
