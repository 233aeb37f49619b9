"""A long option is spelled out (probe 141 L1): argparse took a prefix for the option it begins,
so `mlcostd run --simulat demo` started a daemon on this host's paths and `report --sinc 5m`
read as --since. Every parser of mlcostd (each subcommand's too), mlcost-top and the pricing
command now leaves a shortened option unrecognized, and mlcostd names the option meant."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from daemon.commands.cli import build_parser
from mlcost_tui import cli as top_cli
from pricing import cli as pricing_cli

MLCOSTD = [sys.executable, "-m", "daemon"]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    found = {"": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _long_options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for o in parser._option_string_actions if o.startswith("--") and len(o) > 4)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_no_long_option_of_any_mlcostd_command_is_taken_shortened(command):
    parser = _commands()[command]
    options = _long_options(parser)
    assert options or command == ""  # (mlcostd alone has --version, --help)
    for option in options:
        shortened = option[:-1]
        if shortened in parser._option_string_actions:
            continue  # (another option's full name)
        argv = [command, shortened, "1"] if command else [shortened]
        args, extra = build_parser().parse_known_args(argv)
        assert shortened in extra, f"mlcostd {command} took {shortened} for {option}"


def test_mlcost_top_takes_no_shortened_option():
    parser = top_cli.build_parser()
    for option in _long_options(parser):
        if option[:-1] not in parser._option_string_actions:
            _, extra = parser.parse_known_args([option[:-1], "1"])
            assert option[:-1] in extra, option


def test_mlcost_top_parser_refuses_a_shortened_demo():
    assert top_cli.build_parser().parse_known_args(["--dem"])[1] == ["--dem"]


def test_pricing_s_own_parser_refuses_a_shortened_option(capsys):
    with pytest.raises(SystemExit) as done:
        pricing_cli.main(["--instanc", "p5.48xlarge"])
    assert done.value.code == 2
    assert "unrecognized arguments: --instanc" in capsys.readouterr().err


def test_a_shortened_option_is_an_error_that_names_the_option_meant(tmp_path):
    done = subprocess.run(MLCOSTD + ["report", "--db", str(tmp_path / "none.db"), "--sinc", "5m"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 2
    assert done.stderr.startswith("usage: mlcostd report "), done.stderr
    assert done.stderr.rstrip().endswith(
        "mlcostd report: error: unrecognized arguments: --sinc 5m (did you mean --since?)"), \
        done.stderr
    # run's: parsed, not started (a subprocess of the old code started a daemon here)
    args, extra = build_parser().parse_known_args(["run", "--simulat", "demo"])
    assert args.simulate is None and extra == ["--simulat", "demo"]
