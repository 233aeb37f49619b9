"""The daemon's own network reads are bounded in bytes and time (issue 20, item 7): a unit-cost
counter page or an instance-metadata answer that trickles stops at its deadline, one that never
ends stops at its byte cap, a counter of +Inf or NaN is refused naming the value, and an API
answer past the client's cap is a ClientError, not gigabytes in memory. A client's --token-file
is read the same way: a FIFO, a device or a file of megabytes is refused, not waited on or
sent."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from hostile_http import ENDLESS, TRICKLE, HostileServer, finishes_within

from daemon.analysis.meters import read_counter
from daemon.client import MAX_ANSWER_BYTES, Client, ClientError, read_token_file
from daemon.wire import TOKEN_MAX_BYTES, TOKEN_MIN_CHARS
from pricing.detect import ProbeError, _request


def test_a_trickling_counter_page_stops_at_the_deadline():
    with HostileServer(TRICKLE) as server:
        done, outcome = finishes_within(10, read_counter, server.url, "tokens", timeout_s=1.0)
    assert done, "read_counter was still reading a trickling answer after 10 s"
    assert isinstance(outcome, OSError) and "did not arrive in time" in str(outcome), outcome


def test_an_endless_counter_page_stops_at_the_cap():
    with HostileServer(ENDLESS) as server:
        done, outcome = finishes_within(20, read_counter, server.url, "tokens", timeout_s=15.0)
    assert done
    assert isinstance(outcome, OSError), outcome
    assert f"larger than {4 << 20} bytes" in str(outcome) and server.url in str(outcome)


@pytest.mark.parametrize("value, shown", [("+Inf", "inf"), ("NaN", "nan"), ("-5", "-5")])
def test_a_counter_that_is_not_a_count_is_refused_naming_the_value(value, shown):
    page = f"# TYPE tokens counter\ntokens_total {value}\n".encode()
    with HostileServer(page) as server, pytest.raises(ValueError) as caught:
        read_counter(server.url, "tokens")
    assert f"tokens_total={shown}" in str(caught.value), caught.value
    assert "is not a count" in str(caught.value)


def test_a_trickling_metadata_answer_stops_at_the_probe_deadline():
    with HostileServer(TRICKLE) as server:
        done, outcome = finishes_within(10, _request, "GET", server.url + "/latest/meta-data",
                                        {}, time.monotonic() + 1.0)
    assert done, "the metadata probe was still reading after 10 s (its budget was 1 s)"
    assert isinstance(outcome, ProbeError) and "in time" in str(outcome), outcome


def test_an_api_answer_past_the_cap_is_a_client_error():
    async def ask(url: str) -> object:
        async with Client(url, timeout_s=30) as client:
            try:
                return await client.health()
            except ClientError as exc:
                return exc

    # a daemon that sends one byte more than the cap, then holds the connection open
    with HostileServer(("limited", MAX_ANSWER_BYTES + 1), "application/json") as server:
        outcome = asyncio.run(ask(server.url))
    assert isinstance(outcome, ClientError), outcome
    # (the cap's error, not the 30 s timeout's: it stopped reading at the cap)
    assert f"larger than {MAX_ANSWER_BYTES} bytes" in str(outcome), outcome


def test_a_token_file_that_is_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "token"
    os.mkfifo(fifo)  # no writer: an open that waits for one never returns
    for path in (fifo, "/dev/null", tmp_path):
        done, outcome = finishes_within(10, read_token_file, path)
        assert done, f"reading the token file {path} was still waiting after 10 s"
        assert isinstance(outcome, ClientError), (path, outcome)
        assert f"the token file {path} is not a regular file" in str(outcome), outcome


@pytest.mark.parametrize("text", [
    "x" * (TOKEN_MAX_BYTES + 1),  # past the cap: read no further than it, never sent
    "first-line-of-a-file\nsecond-line-of-it\n",  # a header cannot hold two lines
    "x" * (TOKEN_MIN_CHARS - 1) + "\n",  # shorter than any token the daemon accepts
    "\x1b[2J" + "x" * TOKEN_MIN_CHARS,  # a control character
    "",
], ids=["past the cap", "two lines", "too short", "a control character", "empty"])
def test_a_token_file_that_holds_no_token_is_refused_without_showing_it(tmp_path, text):
    path = tmp_path / "token"
    path.write_text(text)
    with pytest.raises(ClientError) as caught:
        read_token_file(path)
    assert f"a token is one line of {TOKEN_MIN_CHARS} to {TOKEN_MAX_BYTES} characters" in str(
        caught.value), caught.value
    assert "second-line" not in str(caught.value) and "xxxx" not in str(caught.value)


def test_a_token_file_gives_its_one_line_without_the_line_break(tmp_path):
    path = tmp_path / "token"
    path.write_text("  a-token-of-the-daemon-0123456789 with a space\n")
    assert read_token_file(path) == "a-token-of-the-daemon-0123456789 with a space"
