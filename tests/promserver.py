"""A real Prometheus (/usr/bin/prometheus, Debian's package) for the fleet tests: its own folder,
a port the kernel chooses, a short scrape interval, the repository's rules loaded; queried
through its HTTP API. Stopped by the test that started it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from lifeline import spawn_options
from simhost import poll

PROMETHEUS = "/usr/bin/prometheus"
ROOT = Path(__file__).resolve().parents[1]
RULE_FILES = [ROOT / "deploy" / "prometheus" / "mlcost-rules.yml",
              ROOT / "deploy" / "prometheus" / "mlcost-alerts.yml"]
_LISTENING = re.compile(r'msg="Listening on" address=[\d.]+:(\d+)')


class Prometheus:
    def __init__(self, folder: Path, targets: list[str], job: str = "mlcost",
                 interval_s: float = 1.0, target_labels: dict[str, str] | None = None,
                 scrape: dict[str, Any] | None = None) -> None:
        """`target_labels`: the static targets' labels (as a service discovery's relabelling
        leaves them); `scrape`: more keys of the job's scrape config (honor_labels,
        relabel_configs ...)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.config = folder / "prometheus.yml"
        self.config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": f"{interval_s:g}s",
                       "evaluation_interval": f"{interval_s:g}s",
                       "scrape_timeout": f"{interval_s:g}s"},
            "rule_files": [str(p) for p in RULE_FILES],
            "scrape_configs": [{"job_name": job, **(scrape or {}), "static_configs": [
                {"targets": targets, **({"labels": target_labels} if target_labels else {})}]}],
        }, indent=2))
        self.log_path = folder / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.config}",
             f"--storage.tsdb.path={folder / 'data'}", "--web.listen-address=127.0.0.1:0",
             "--storage.tsdb.retention.time=1d"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            **spawn_options())
        try:
            found = poll(lambda: self.proc.poll() is None and _LISTENING.search(self.log()), 60,
                         "prometheus listening", explain=self.log_tail)
            self.url = f"http://127.0.0.1:{found.group(1)}"
            poll(self.ready, 60, "prometheus ready", explain=self.log_tail)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self) -> str:
        return f"--- prometheus log ---\n{self.log()[-3000:]}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=20) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def values(self, expr: str, by: str = "instance") -> dict[str, float]:
        return {r["metric"].get(by, ""): float(r["value"][1]) for r in self.query(expr)}

    def alerts(self) -> list[dict[str, Any]]:
        return self.api("alerts")["alerts"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
