"""`mlcostd mcp` through the MCP SDK's own stdio client, against a real daemon on the demo host.

The server runs as an assistant would start it (`python -m daemon mcp --socket ...`, a real
subprocess speaking MCP on stdio); its answers are checked against what the daemon's /v1/now
says, and its tool list against the promise that no tool acts.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

# The SDK is in the `test` extra (as in `mcp`): no skip, a missing SDK fails the suite.
import pytest
from livedaemon import DEMO_CONFIG
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from simhost import poll

from daemon.commands import mcp as mcp_command
from daemon.sources.safe_text import is_safe

ROOT = Path(__file__).resolve().parents[2]
CALL_TIMEOUT_S = 60.0
ACTING_WORDS = ("apply", "snooze", "kill", "stop", "terminate", "resize", "signal", "delete",
                "write", "set_")


def converse(socket: Path, calls: list[tuple[str, dict[str, Any]]],
             errlog: Path | None = None) -> tuple[list[Any], list[Any]]:
    """One MCP session with `mlcostd mcp --socket SOCKET`: its tools, then each call's result;
    the server's stderr into `errlog` if given."""

    async def main() -> tuple[list[Any], list[Any]]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "daemon", "mcp", "--socket", str(socket)],
            env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
        if errlog is None:
            return await session(params, sys.stderr)
        with errlog.open("w") as log:
            return await session(params, log)

    async def session(params: StdioServerParameters, log: Any) -> tuple[list[Any], list[Any]]:
        async with stdio_client(params, errlog=log) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session:
                await session.initialize()
                tools = (await session.list_tools()).tools
                results = [await session.call_tool(name, arguments) for name, arguments in calls]
                return tools, results

    return asyncio.run(main())


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return json.loads(result.content[0].text)


def holders(now: dict[str, Any], gpu: int) -> set[int]:
    return {p["pid"] for p in now["processes"] if gpu in [g["index"] for g in p["gpus"]]}


@pytest.fixture(scope="module")
def demo(mlcostd) -> Any:
    """The demo host once it has recorded 17 s (the report below asks for the last 15 s, the
    compare for the 5 s from 10 s ago), stands by recommendations, and has an idle GPU held by
    a notebook and an idle GPU no process holds. With the tests' short waits (livedaemon.DEMO_CONFIG): under the demo's own
    one-minute waits it ran a minute or more longer for the same answers, at ~0.2 CPU-s a
    second."""
    daemon = mlcostd("demo", interval=0.5, config=DEMO_CONFIG)

    def ready() -> bool:
        now = daemon.now()
        notebook_gpus = [g for p in now["processes"] if p.get("kind") == "notebook"
                         for g in (x["index"] for x in p["gpus"])]
        return (now["tick"] >= 34 and len(now["recommendations"]) >= 2 and bool(notebook_gpus)
                and any(not holders(now, g["index"]) and not g["busy"] for g in now["gpus"]))

    poll(ready, 240, "the demo recording 17 s, with recommendations and a notebook",
         every=1.0, explain=daemon.log_tail)
    return daemon


@pytest.fixture(scope="module")
def conversation(demo) -> dict[str, Any]:
    """One session with the server: the tools, and each tool asked once, beside /v1/now read
    just before and just after."""
    before = demo.now()
    held = next(g for p in before["processes"] if p.get("kind") == "notebook"
                for g in (x["index"] for x in p["gpus"]))
    free = next(g["index"] for g in before["gpus"]
                if not holders(before, g["index"]) and not g["busy"])
    calls = [("why_idle", {"gpu": held}), ("why_idle", {"gpu": free}),
             ("recommendations", {"limit": 2}), ("costs_now", {}),
             ("report", {"since": "15s"}), ("compare", {"before": "10s-ago/5s", "after": "5s"}),
             ("why_idle", {"gpu": 99}), ("report", {"since": "soon"}),
             ("compare", {"before": str(demo.folder / "mlcost.db"), "after": "10s"}),
             ("compare", {"before": "10s", "after": "10s"}),
             ("recommendations", {"limit": 20}),
             # misspelt and unknown keys (probe 151 F2)
             ("report", {"sinse": "5m", "untill": "2026-12-01T09:00"}),
             ("why_idle", {"gpu": held, "extra": "x"}), ("costs_now", {"db": "/etc/passwd"}),
             # a range too long to be one (F3), a boolean for an integer (F4)
             ("compare", {"before": "x" * 300, "after": "1m"}),
             ("report", {"since": "1h", "until": "9" * 300}),
             ("why_idle", {"gpu": True}), ("why_idle", {"gpu": "true"}),
             ("recommendations", {"limit": True}),
             # a range before the recording began: no sample in it (F6)
             ("report", {"since": "1m", "until": str(int(before["ts"]) - 86400)})]
    tools, results = converse(demo.socket, calls, errlog=demo.folder / "mcp.stderr")
    after = demo.now()
    return {"tools": tools, "results": dict(zip([f"{n}{i}" for i, (n, _) in enumerate(calls)],
                                                results, strict=True)),
            "before": before, "after": after, "held": held, "free": free,
            "log": (demo.folder / "mcp.stderr").read_text()}


def test_the_tools_are_the_five_read_only_questions_and_none_acts(conversation):
    tools = conversation["tools"]
    assert sorted(t.name for t in tools) == sorted(mcp_command.TOOLS)
    for tool in tools:
        assert not any(word in tool.name for word in ACTING_WORDS), tool.name
        assert tool.annotations.read_only_hint is True, tool.name
        assert tool.annotations.destructive_hint is False, tool.name
        assert tool.description, tool.name


def test_why_idle_names_the_processes_holding_an_idle_gpu_as_v1_now_does(conversation):
    now, gpu = conversation["before"], conversation["held"]
    why = answer(conversation["results"]["why_idle0"])
    assert why["gpu"] == gpu and why["busy"] is False
    assert "held" in why["verdict"] and "held by no process" not in why["verdict"]
    assert {p["pid"] for p in why["processes"]} == holders(now, gpu) == holders(
        conversation["after"], gpu)
    assert [p["kind"] for p in why["processes"]] == ["notebook"]
    # the phase it is in now beside its balance's (probe 125 F16): idle, not back at work
    assert [p["phase_now"] for p in why["processes"]] == [p["phase"] for p in why["processes"]]
    price = next(g for g in now["burn"]["gpus"] if g["index"] == gpu)
    assert why["price_per_hour"] == pytest.approx(price["price_per_hour"])
    assert why["wasted_per_hour"] == pytest.approx(why["price_per_hour"])  # idle: all wasted


def test_why_idle_says_an_unheld_idle_gpu_is_paid_for_and_unused(conversation):
    why = answer(conversation["results"]["why_idle1"])
    assert why["gpu"] == conversation["free"] and why["processes"] == []
    assert "held by no process" in why["verdict"]
    assert why["cost_basis"] == "unheld"


def test_recommendations_are_the_daemons_own_by_savings_with_evidence_and_what_to_do(
        conversation):
    recs = answer(conversation["results"]["recommendations2"])
    standing = {r["id"]: r for doc in (conversation["before"], conversation["after"])
                for r in doc["recommendations"]}
    assert recs["shown"] == len(recs["recommendations"]) == 2
    for rec in recs["recommendations"]:
        assert rec["id"] in standing  # nothing made up
        # the figures in a summary move with every evaluation; what it is about does not
        assert (rec["rule"], rec["target"]) == (standing[rec["id"]]["rule"],
                                                standing[rec["id"]]["target"])
        assert rec["evidence"] and rec["what_to_do"]["kind"]
        assert rec["standalone_savings_per_month"] > 0
    # the savings order (/v1/now's, mlcost-top's): largest combined share first
    combined = [r["combined_savings_per_month"] for r in recs["recommendations"]]
    assert combined == sorted(combined, reverse=True)


def test_recommendations_give_the_combined_savings_that_add_up_in_v1_nows_order(conversation):
    """probe 151 F1: the standalone figures alone (five summed to $24,658/month on a
    $23,924/month bill), sorted by them, not in the order mlcost-top shows."""
    recs = answer(conversation["results"]["recommendations10"])
    shown = recs["recommendations"]
    assert recs["shown"] == recs["count"] == len(shown) >= 2  # every one, so they add up
    assert all("savings_per_month" not in r for r in shown)  # each figure says which it is
    combined = [r["combined_savings_per_month"] for r in shown]
    assert sum(combined) == pytest.approx(recs["savings"]["potential_per_month"], rel=1e-9)
    assert sum(combined) <= recs["savings"]["bill_per_month"] + 1e-6
    for rec in shown:
        assert 0 <= rec["combined_savings_per_month"] <= rec["standalone_savings_per_month"] + 1e-6
    # /v1/now's order, as read just before or just after (an evaluation may fall between)
    orders = [[r["id"] for r in doc["recommendations"]]
              for doc in (conversation["before"], conversation["after"])]
    assert [r["id"] for r in shown] in orders
    # the order the combined shares were taken in (releases before shrinks), said per item
    assert sorted(r["savings_order"] for r in shown) == list(range(1, len(shown) + 1))
    tool = next(t for t in conversation["tools"] if t.name == "recommendations")
    assert "combined figures add up" in tool.description
    assert "standalone figures do not add up" in tool.description


def test_costs_now_prices_every_gpu_and_process_of_v1_now(conversation):
    costs, now = answer(conversation["results"]["costs_now3"]), conversation["before"]
    assert [g["index"] for g in costs["gpus"]] == [g["index"] for g in now["gpus"]]
    assert costs["price"]["per_gpu_per_hour"] == pytest.approx(now["price"]["per_gpu_per_hour"])
    # the GPUs the price counts that NVML does not list, as /v1/now's burn says them
    assert (costs["unseen_gpus"], costs["warning"]) == (now["burn"]["unseen_gpus"],
                                                        now["burn"]["warning"])
    assert {p["pid"] for p in costs["processes"]} <= {
        p["pid"] for doc in (now, conversation["after"]) for p in doc["processes"]}
    burns = [p["burn_per_hour"] for p in costs["processes"]]
    assert burns == sorted(burns, reverse=True)
    # the day's spend, between what /v1/now said before and after the call
    assert now["spend_today"] <= costs["spend_today"] <= conversation["after"]["spend_today"]


def test_costs_nows_explanation_matches_its_figures_for_a_sole_holder(conversation):
    """probe 151 F5: `how` said burn = price x SM share, while a process alone on a GPU with
    an sm_share_pct of 10 burnt the whole GPU price (README: its share of that GPU)."""
    costs = answer(conversation["results"]["costs_now3"])
    assert "sole holder pays the whole GPU price" in costs["how"]
    assert "times its SM share" not in costs["how"]
    per_gpu = {g["index"]: g["price_per_hour"] for g in costs["gpus"]}
    held_by: dict[int, list[dict[str, Any]]] = {}
    for p in costs["processes"]:
        for gpu in p["gpus"]:
            held_by.setdefault(gpu, []).append(p)
    sole = [(ps[0], gpu) for gpu, ps in held_by.items()
            if len(ps) == 1 and ps[0]["gpus"] == [gpu]]
    assert sole  # the demo has processes alone on their GPU
    for process, gpu in sole:
        assert process["burn_per_hour"] == pytest.approx(per_gpu[gpu], rel=1e-6), process


def test_report_and_compare_cover_the_ranges_asked(conversation):
    report = answer(conversation["results"]["report4"])
    assert report["window"]["ticks"] > 0
    assert report["window"]["until"] - report["window"]["since"] == pytest.approx(15, abs=1)
    # the document's own keys (probe 151 F6: price, cost and warnings named none of them, so
    # spend, the combined savings and the timeline were dropped)
    assert {"spend", "savings", "timeline", "burn", "review"} <= set(report)
    assert report["spend"]["total"] > 0
    assert report["savings"]["potential_per_month"] <= report["savings"]["bill_per_month"]
    points = report["timeline"]["points"]
    assert 0 < len(points) <= mcp_command.TIMELINE_POINTS
    assert any(p["burn_per_hour"] for p in points)
    compared = answer(conversation["results"]["compare5"])
    assert compared["a"]["ticks"] > 0 and compared["b"]["ticks"] > 0
    assert compared["figures"]


def test_a_bad_question_is_answered_with_what_is_wrong(conversation):
    gpu = conversation["results"]["why_idle6"]
    assert gpu.is_error and "no GPU 99" in gpu.content[0].text
    report = conversation["results"]["report7"]
    assert report.is_error and "since" in report.content[0].text


def test_an_unknown_or_misspelt_argument_is_refused_by_name_never_a_default(conversation):
    """probe 151 F2: `sinse`/`untill` answered the default last hour, `db` and `extra` were
    dropped without a word."""
    results = conversation["results"]
    report = results["report11"]
    assert report.is_error
    text = report.content[0].text
    assert "unknown arguments sinse, untill" in text and "report takes since, until" in text
    why = results["why_idle12"]
    assert why.is_error and "unknown argument extra; why_idle takes gpu" in why.content[0].text
    costs = results["costs_now13"]
    assert costs.is_error and "unknown argument db; costs_now takes no arguments" in \
        costs.content[0].text
    # and the tool list says so, as the API's schema does
    for tool in conversation["tools"]:
        assert tool.input_schema.get("additionalProperties") is False, tool.name


def test_a_range_too_long_to_be_one_is_refused_with_why_and_no_traceback(conversation):
    """probe 151 F3: a 300-character range answered only "Error executing tool compare" and
    logged a traceback ending `OSError: File name too long`."""
    results = conversation["results"]
    compared = results["compare14"]
    assert compared.is_error
    assert "before='xxxx" in compared.content[0].text
    assert "(300 characters) is not a range" in compared.content[0].text
    report = results["report15"]
    assert report.is_error and "until=" in report.content[0].text
    assert "(300 characters) is not a range" in report.content[0].text
    log = conversation["log"]
    assert "Traceback" not in log and "File name too long" not in log, log[-2000:]


def test_a_report_of_a_range_with_no_sample_says_so_and_what_the_store_holds(conversation):
    """probe 151 F6: a full document of zeros and no word."""
    report = answer(conversation["results"]["report19"])
    assert report["message"].startswith("No samples in this range")
    assert "the store holds" in report["message"] and "spend" not in report
    assert report["window"]["ticks"] == 0


def test_a_boolean_is_not_taken_for_an_integer(conversation):
    """probe 151 F4: `gpu=true` answered about GPU 1, `limit=true` gave one recommendation."""
    results = conversation["results"]
    for key, name in (("why_idle16", "gpu"), ("why_idle17", "gpu"),
                      ("recommendations18", "limit")):
        assert results[key].is_error, key
        assert f"{name}=true is a boolean; {name} is an integer" in results[key].content[0].text


def test_compare_takes_ranges_only_never_a_path_the_assistant_names(conversation):
    result = conversation["results"]["compare8"]  # the store itself: a file that exists
    # (it read "'' must end in -ago")
    assert result.is_error and "is a path: only ranges of the daemon's store are compared " \
        "here, never files" in result.content[0].text


def test_compare_refuses_one_range_on_both_sides(conversation):
    result = conversation["results"]["compare9"]
    assert result.is_error and "the same range" in result.content[0].text


def test_without_the_sdk_mlcostd_mcp_says_which_extra_to_install(monkeypatch, capsys, tmp_path):
    from daemon.commands.cli import main

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # import fails
    assert main(["mcp", "--socket", str(tmp_path / "s.sock")]) == 2
    assert "pip install 'mlcost[mcp]'" in capsys.readouterr().err


def test_no_daemon_is_a_clear_error_not_a_crash(tmp_path):
    _tools, (result,) = converse(tmp_path / "absent.sock", [("costs_now", {})])
    assert result.is_error
    text = result.content[0].text
    assert "no mlcostd at unix:" in text and "mlcostd run" in text


def test_text_from_processes_reaches_the_assistant_escaped_and_bounded():
    hostile = "python train.py \x1b]52;c;aGk=\x07\n\u202eevil" + "x" * 5000
    shown = mcp_command.bounded({"command": hostile, "evidence": [hostile] * 80,
                                 "patch": "line 1\nline 2\x1b[2J"})
    assert is_safe(shown["command"]) and "\\x1b" in shown["command"]
    assert len(shown["command"]) <= mcp_command.MAX_TEXT_CHARS + 10
    assert len(shown["evidence"]) == mcp_command.MAX_ITEMS + 1
    assert shown["evidence"][-1] == "(30 more not shown)"
    assert shown["patch"] == "line 1\nline 2\\x1b[2J"  # several lines kept, the escape shown
