"""Every duration and time a user or a client gives is checked for range (issue 20, item 8): a
huge integer is a 400 naming the field (never an OverflowError and a 500), a time before 2020
(`"until": 100`, which made an empty 1970 snapshot) is refused, and the command line says the
same in one line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from daemon import clock
from daemon.api.routes import _body
from daemon.api.snapshots import add_snapshot_routes
from daemon.config import Config, parse_duration
from tests.livedaemon import ROOT


class FakeDaemon:
    config = Config()

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    async def take_snapshot(self, **kwargs: Any) -> dict[str, Any]:
        self.asked.append(kwargs)
        return {"path": "/nowhere/x.db", "upload": []}


def post(daemon: FakeDaemon, raw: bytes) -> tuple[int, dict[str, Any]]:
    async def main() -> tuple[int, dict[str, Any]]:
        app = web.Application()
        add_snapshot_routes(app, daemon, _body)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            response = await client.post("/v1/snapshots", data=raw,
                                         headers={"Content-Type": "application/json"})
            return response.status, await response.json()

    return asyncio.run(main())


HUGE = "1" + "0" * 400  # 10**400: float() overflows


def body(template: str) -> str:
    return template.replace("HUGE", HUGE)


@pytest.mark.parametrize("raw, field, allowed", [
    (body('{"since": HUGE}'), "since=an integer of 401 digits", "1 s"),
    (body('{"since": -HUGE}'), "since=", "1 s"),
    ('{"since": "7d", "until": 100}', "until=100", "2020-01-01"),
    (body('{"since": "7d", "until": HUGE}'), "until=an integer of 401 digits", "2020-01-01"),
    ('{"since": "7d", "until": "1969-12-31T00:00Z"}', "until='1969-12-31T00:00Z'", "2020"),
    ('{"since": "' + "9" * 400 + '"}', "since=", "1 s"),
], ids=["since-10e400", "since-minus-10e400", "until-100", "until-10e400", "until-1969",
        "since-400-nines"])
def test_a_snapshot_request_out_of_range_is_a_400_naming_the_field(raw, field, allowed):
    daemon = FakeDaemon()
    status, answer = post(daemon, raw.encode())
    assert status == 400, answer
    assert field in answer["error"] and allowed in answer["error"], answer["error"]
    assert len(answer["error"]) < 400
    assert daemon.asked == []


def test_a_sensible_range_still_reaches_the_daemon():
    daemon = FakeDaemon()
    until = clock.now() - 3600
    status, answer = post(daemon, b'{"since": "7d", "until": %d}' % until)
    assert status == 201, answer
    assert daemon.asked[0]["until"] == pytest.approx(until)
    assert daemon.asked[0]["since"] == pytest.approx(until - 7 * 86400)


@pytest.mark.parametrize("value", [10**400, -(10**400), "9" * 400, float("inf"), 1e12],
                         ids=["10e400", "minus-10e400", "400-nines", "inf", "1e12"])
def test_parse_duration_refuses_what_no_one_means_with_a_value_error(value):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(value)


@pytest.mark.parametrize("value", [10**400, 100, "1e400", "0", "2201-01-01"],
                         ids=["10e400", "100", "1e400-text", "0", "2201"])
def test_parse_time_refuses_times_no_store_holds(value):
    with pytest.raises(ValueError, match="2020-01-01 to 2200-01-01|not a time"):
        clock.parse_time(value)


@pytest.mark.parametrize("args, flag", [
    (["snapshot", "--since", "7d", "--until", "100"], "--until"),
    (["snapshot", "--since", "9" * 400], "--since"),
    (["snapshot", "--since", "1m", "--until", "1" + "0" * 400], "--until"),
    (["report", "--since", "9" * 400], "--since"),
], ids=["snapshot-until-100", "snapshot-since-400-nines", "snapshot-until-10e400",
        "report-since-400-nines"])
def test_the_command_line_refuses_out_of_range_times_in_one_line(tmp_path, args, flag):
    db = tmp_path / "mlcost.db"
    db.write_bytes(b"")  # report wants a file there; the flag is checked before it is read
    done = subprocess.run(
        [sys.executable, "-m", "daemon.commands.cli", *args, "--db", str(db),
         *(["--socket", str(tmp_path / "none.sock")] if args[0] == "snapshot" else [])],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=os.environ)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert flag in done.stderr


POSITIVE = "a positive number and a unit (e.g. 30s, 15m, 6h, 8d)"
FOR_FORMS = ("from 0 to 30d: 0 (idle now, the default) or a number and a unit (e.g. 90s, 30m, "
             "2h)")


@pytest.mark.parametrize("args, allowed", [
    (["report", "--since", "-5m", "--db", "none.db"], POSITIVE),
    (["snapshot", "--since", "-5m", "--db", "none.db"], POSITIVE),
    (["idle", "--for", "-5m"], FOR_FORMS),
], ids=["report-since", "snapshot-since", "idle-for"])
def test_a_negative_duration_is_refused_by_its_flag_not_taken_for_an_option(tmp_path, capsys,
                                                                            args, allowed):
    """argparse took `-5m` for an option ("expected one argument"); the flag's own check says
    the value is negative and what a duration is for that flag: `idle --for 0` (its default)
    is "idle now", so its message said "a positive number" of a flag that takes 0."""
    from daemon.commands.cli import main

    args = [str(tmp_path / a) if a == "none.db" else a for a in args]
    assert main(args) == 2
    assert capsys.readouterr().err == (f"mlcostd {args[0]}: {args[1]} '-5m' is negative: a "
                                       f"duration is {allowed}\n")


@pytest.mark.parametrize("value, shown", [
    ("31d", "'31d'"), ("2592001", "'2592001'"),
    ("9999999999999999999d", "'9999999999999999999d'"),  # past 100 years
    ("9" * 400, f"'{'9' * 40}...'"),  # past what a float holds
], ids=["31d", "30d-and-a-second", "past-100-years", "400-nines"])
def test_idle_for_past_30d_is_one_message_with_the_one_range(tmp_path, capsys, value, shown):
    """`--for 31d` said "must be between 0 and 30d" and `--for 9999999999999999999d` "is not a
    duration of at most 3153600000 s (100 years)" (probe 121 F11): one range, said as --help,
    the negative value's message and the README say it."""
    from daemon.commands import idle
    from daemon.commands.cli import main

    assert main(["idle", "--for", value, "--connect", f"unix:{tmp_path / 'none.sock'}"]) == 2
    assert capsys.readouterr().err == (f"mlcostd idle: --for {shown} is more than 30d: a "
                                       f"duration is {FOR_FORMS}\n")
    parser = argparse.ArgumentParser()
    idle.add_arguments(parser)
    assert "from 0 to 30d" in " ".join(parser.format_help().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "With `--for D` (from 0 to 30d;" in readme


def test_idle_for_0_asks_whether_the_host_is_idle_now(tmp_path, capsys):
    from daemon.commands.cli import main

    assert main(["idle", "--for", "0", "--connect", f"unix:{tmp_path / 'none.sock'}",
                 "--json"]) == 1  # no daemon there: active, fail safe; not a bad flag
    assert json.loads(capsys.readouterr().out)["for_s"] == 0


@pytest.mark.parametrize("value", ["5 m", " 5m", "5m ", "\uff15m", "\u0665m", "5m\n",
                                   "5\u00a0m"],
                         ids=["inner-space", "leading-space", "trailing-space",
                              "full-width-digit", "arabic-indic-digit", "newline", "nbsp"])
def test_a_duration_is_ascii_digits_and_a_unit_with_no_spaces(value):
    """`--since '5 m'`, `' 5m'` and a full-width '\uff15m' were read as 5 minutes."""
    assert parse_duration("5m") == parse_duration("300") == parse_duration("300s") == 300
    with pytest.raises(ValueError) as refused:
        parse_duration(value)
    assert str(refused.value) == (f"{value!r} is not a duration (ASCII digits and a unit, no "
                                  "spaces: e.g. 30s, 15m, 6h, 8d; a number alone is seconds)")


@pytest.mark.parametrize("args", [["report", "--since", "5 m", "--db", "none.db"],
                                  ["snapshot", "--since", "\uff15m", "--db", "none.db"],
                                  ["idle", "--for", " 30m"],
                                  ["profile", "--duration", "5 m", "--out", "none", "--", "true"]],
                         ids=["report-since", "snapshot-since", "idle-for", "profile-duration"])
def test_each_duration_flag_refuses_spaces_and_other_digits_in_one_line(tmp_path, capsys, args):
    from daemon.commands.cli import main

    command, flag, value = args[:3]
    assert main([str(tmp_path / a) if a in ("none.db", "none") else a for a in args]) == 2
    assert capsys.readouterr().err == (f"mlcostd {command}: {flag} {value!r} is not a duration "
                                       "(ASCII digits and a unit, no spaces: e.g. 30s, 15m, "
                                       "6h, 8d; a number alone is seconds)\n")


@pytest.mark.parametrize("args, words", [
    (["report", "--since", "0"], "--since '0' must be at least 1 s"),
    (["prices", "--observed", "--since", "0"], "--since '0' must be at least 1 s"),
    (["prices", "--observed", "--run-hours", "inf"], "--run-hours: 'inf' is not a number"),
    (["prices", "--fits", "nan"], "--fits: 'nan' is not a memory size from 0 to 100000 GiB"),
    (["prices", "--fits", "10", "--headroom", "inf"], "--headroom: 'inf' is not a number"),
    (["prices", "--fits", "10", "--limit", "-1"], "--limit: '-1' is not a whole number"),
    (["prices", "--instance", "p5.48xlarge", "--managed", "--hours-per-month", "1e400"],
     "--hours-per-month: '1e400' is not a number from 0 to 744"),
    (["prices", "--observed", "--pid", "99999999"],  # (its range read "from 1 to 4.1943e+06")
     "--pid: '99999999' is not a whole number from 1 to 4194304"),
], ids=["report-since-0", "observed-since-0", "run-hours-inf", "fits-nan", "headroom-inf",
        "limit-negative", "hours-per-month-1e400", "pid-out-of-range"])
def test_numeric_flags_refuse_inf_nan_and_out_of_range_values(tmp_path, args, words):
    db = tmp_path / "mlcost.db"
    db.write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-m", "daemon.commands.cli", *args, "--db", str(db), "--cache",
         str(tmp_path / "prices.json")] if args[0] == "prices" else
        [sys.executable, "-m", "daemon.commands.cli", *args, "--db", str(db)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=os.environ)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and words in done.stderr, done.stderr
