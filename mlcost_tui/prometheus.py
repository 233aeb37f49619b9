"""The fleet as Prometheus sees it, for `mlcost-top --prometheus URL`: a handful of instant
queries over mlcostd's series (deploy/prometheus/, README "On a fleet"), merged into one row per
scraped daemon. No connection to any daemon: a fleet of thousands of hosts is a few queries.

A GPU its daemon cannot read (`mlcost_gpu_up` 0: lost, timed out) is counted apart: billed,
never idle. A daemon Prometheus cannot scrape is a row that says so (`up == 0`; its other series go stale
at once), under the name and instance type it last had (`mlcost_host_info` over the last hour).
No mlcostd at all under the scrape jobs asked for is said, with the jobs its series are under
where there are some. A host's API is reachable from mlcost-top when its mlcostd serves the API on TCP
(`--listen`): `mlcost_host_info` carries that port (`api_port`).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

import aiohttp

from daemon.wire import one_line, without_url_credentials

QUERY_TIMEOUT_S = 10.0
DEFAULT_JOB = "mlcost.*"  # the scrape jobs of mlcostd (README "On a fleet": `job_name: mlcost`)
LAST_SEEN = "1h"  # how far back a down host's name is looked for
# The largest answer of one query: 10,000 hosts x ~300 bytes per series is ~3 MB.
MAX_ANSWER_BYTES = 64 << 20
# A host with more GPUs than this is a broken series, not a machine.
MAX_GPUS_PER_HOST = 4096


class PrometheusError(Exception):
    """Prometheus did not answer, or refused a query; the message says which and why, and
    `advice` what to do (kept apart: "check the URL" is wrong for a URL that answered before)."""

    def __init__(self, message: str, advice: str = "") -> None:
        super().__init__(f"{message}; {advice}" if advice else message)
        self.message = message
        self.advice = advice


@dataclass(frozen=True)
class FleetHost:
    """One scraped mlcostd."""

    instance: str  # the scrape target, host:port
    up: bool
    hostname: str = ""
    instance_type: str = ""
    lifecycle: str = ""
    burn_per_hour: float | None = None
    wasted_per_hour: float | None = None
    gpus: int | None = None
    idle_gpus: int | None = None
    lost_gpus: int | None = None  # its GPUs mlcostd cannot read (mlcost_gpu_up 0): billed all
    # the same, never idle
    savings_per_month: float | None = None
    top_rule: str = ""
    top_rule_savings_per_month: float | None = None
    api_port: str = ""
    # hostname and instance_type are the last ones Prometheus had (a host that stopped
    # reporting), not the ones of now
    last_seen: bool = False
    # a down host's price an hour as it last reported it within LAST_SEEN: billed all the same
    # while its daemon does not answer (deploy/prometheus's mlcost:fleet_unreported_dollars_
    # per_hour, the same reading)
    last_price_per_hour: float | None = None

    @property
    def api_url(self) -> str | None:
        """http://HOST:PORT of the host's API, or None when it serves none on TCP."""
        if not self.api_port:
            return None
        host = self.instance.rsplit(":", 1)[0] if ":" in self.instance else self.instance
        return f"http://{host}:{self.api_port}"


@dataclass(frozen=True)
class FleetView:
    hosts: tuple[FleetHost, ...]
    job: str = DEFAULT_JOB  # the scrape jobs asked for (a regex)
    # With no host: the scrape jobs mlcostd's series are under instead, where there are some.
    elsewhere: tuple[str, ...] = ()

    @property
    def up(self) -> int:
        return sum(1 for h in self.hosts if h.up)

    def total(self, field: str) -> float | None:
        values = [getattr(h, field) for h in self.hosts if h.up and getattr(h, field) is not None]
        return sum(values) if values else None

    def unreported(self) -> tuple[int, float]:
        """The hosts down now that reported a price within LAST_SEEN, and those prices summed:
        the part of the fleet's burn its daemons do not report now (the cloud bills them)."""
        prices = [h.last_price_per_hour for h in self.hosts
                  if not h.up and h.last_price_per_hour is not None]
        return len(prices), sum(prices)

    def burn(self) -> float | None:
        """The fleet's burn an hour: the hosts up, and those down at their last price."""
        up = self.total("burn_per_hour")
        count, down = self.unreported()
        return up if not count else (up or 0.0) + down


class PrometheusFleet:
    """The fleet table's queries against one Prometheus (the HTTP API, /api/v1/query)."""

    def __init__(self, url: str, job: str = DEFAULT_JOB, timeout_s: float = QUERY_TIMEOUT_S
                 ) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusError(f"--prometheus {without_url_credentials(url)!r} is not an "
                                  "http(s):// URL (e.g. "
                                  "http://prometheus:9090)")
        self.url = url.rstrip("/")
        # as it is shown (title, errors): a user and password in the URL (basic auth, which
        # aiohttp sends from it) never reach the screen
        self.shown_url = without_url_credentials(self.url)
        self.job = job
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector; PrometheusError on any failure."""
        from daemon.client import ClientError, read_answer

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        asked = f"{self.shown_url}/api/v1/query"
        try:
            # the timeout covers the whole answer; read_answer caps its size
            async with self._session.get(f"{self.url}/api/v1/query", params={"query": expr},
                                         timeout=aiohttp.ClientTimeout(total=self.timeout_s)
                                         ) as response:
                raw = await read_answer(response, max_bytes=MAX_ANSWER_BYTES, shown=asked)
                status, reason = response.status, response.reason or ""
                content_type = response.headers.get("Content-Type", "")
        except ClientError as exc:
            raise PrometheusError(f"Prometheus at {self.shown_url}: {exc}") from None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise PrometheusError(f"Prometheus at {self.shown_url} did not answer "
                                  f"({type(exc).__name__}: "
                                  f"{without_url_credentials(str(exc)[:200])})",
                                  "check the URL") from None
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            # something answered, not Prometheus's API: a path prefix, a proxy's page, a login
            kind = one_line(content_type.split(";", 1)[0][:60]) or "no content type"
            raise PrometheusError(
                one_line(f"{asked} answered HTTP {status} {reason[:60]} ({kind}): not the "
                         "Prometheus API"),
                "give --prometheus the URL under which Prometheus serves /api/v1/ (e.g. "
                "http://prometheus:9090, with its --web.route-prefix if it has one)")
        if body.get("status") != "success":
            raise PrometheusError(one_line(f"Prometheus at {self.shown_url} refused {expr!r} "
                                           f"(HTTP {status}): {body.get('error')}"))
        result = (body.get("data") or {}).get("result")
        return result if isinstance(result, list) else []

    async def fetch(self) -> FleetView:
        job = f"job=~{json.dumps(self.job)}"  # a PromQL string: quotes and backslashes escaped
        queries = {
            "up": f"up{{{job}}}",
            "info": f"mlcost_host_info{{{job}}}",
            "seen": f"last_over_time(mlcost_host_info{{{job}}}[{LAST_SEEN}])",
            "price_seen": f"last_over_time(mlcost_host_price_dollars_per_hour{{{job}}}"
                          f"[{LAST_SEEN}])",
            "burn": f"mlcost_host_burn_dollars_per_hour{{{job}}}",
            "wasted": f"mlcost_host_wasted_dollars_per_hour{{{job}}}",
            "gpus": f"count by (instance) (mlcost_gpu_up{{{job}}})",
            "idle": f"count by (instance) (mlcost_gpu_busy{{{job}}} == 0)",
            "lost": f"count by (instance) (mlcost_gpu_up{{{job}}} == 0)",
            "savings": f"sum by (instance) (mlcost_recommendation_savings_dollars_per_month"
                       f"{{{job}}})",
            "top": f"topk by (instance) (1, mlcost_recommendation_savings_dollars_per_month"
                   f"{{{job}}} > 0)",
        }
        answers = await asyncio.gather(*(self.query(q) for q in queries.values()))
        found = dict(zip(queries, answers, strict=True))

        def by_instance(name: str) -> dict[str, dict[str, Any]]:
            return {r.get("metric", {}).get("instance", ""): r for r in found[name]}

        def value(name: str, instance: str) -> float | None:
            """A series' finite value (NaN, ±Inf and what does not parse read as unknown)."""
            row = by_instance(name).get(instance)
            try:
                number = float(row["value"][1]) if row else None
            except (KeyError, IndexError, TypeError, ValueError):
                return None
            return number if number is not None and math.isfinite(number) else None

        def count(name: str, instance: str) -> int | None:
            """A count of GPUs: a whole number from 0 to MAX_GPUS_PER_HOST, else unknown."""
            number = value(name, instance)
            return int(number) if number is not None and 0 <= number <= MAX_GPUS_PER_HOST \
                else None

        info, seen, top = by_instance("info"), by_instance("seen"), by_instance("top")
        hosts = []
        for instance in sorted(by_instance("up")):
            last_seen = instance not in info and instance in seen
            # Label values are whatever Prometheus holds: shown, never sent to the terminal raw.
            labels = {str(k): one_line(str(v)) for k, v in (
                ((seen if last_seen else info).get(instance) or {}).get("metric") or {}).items()}
            best = top.get(instance)
            gpus, idle, lost = (count(name, instance) for name in ("gpus", "idle", "lost"))
            hosts.append(FleetHost(
                instance=one_line(instance), up=value("up", instance) == 1.0,
                hostname=labels.get("Hostname", ""),
                instance_type=labels.get("instance_type", ""),
                lifecycle=labels.get("lifecycle", ""),
                burn_per_hour=value("burn", instance), wasted_per_hour=value("wasted", instance),
                gpus=gpus, idle_gpus=None if gpus is None else (idle or 0),
                lost_gpus=None if gpus is None else (lost or 0),
                savings_per_month=value("savings", instance),
                top_rule=one_line(str((best or {}).get("metric", {}).get("rule", ""))),
                top_rule_savings_per_month=value("top", instance),
                api_port=labels.get("api_port", ""), last_seen=last_seen,
                last_price_per_hour=(None if value("up", instance) == 1.0
                                     else value("price_seen", instance))))
        elsewhere: tuple[str, ...] = ()
        if not hosts:  # mlcostd's series under other scrape jobs: say which
            jobs = await self.query("count by (job) (mlcost_host_info)")
            elsewhere = tuple(sorted(one_line(str(r.get("metric", {}).get("job", "")))
                                     for r in jobs))[:10]
        return FleetView(tuple(hosts), self.job, elsewhere)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
