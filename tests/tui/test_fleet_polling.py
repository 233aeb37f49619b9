"""A fleet keeps each host at its own pace (mlcost_tui/sources.py LiveSource): a host that is
down backs off alone, and one that hangs does not hold the others' figures back."""

from __future__ import annotations

import asyncio

from daemon.client import DaemonUnavailable
from daemon.wire import Now
from mlcost_tui.sources import SOONEST_POLL_S, LiveSource
from tests.tui.fixtures import ScriptedDaemon

TICK = Now.from_dict({"ts": 1.7e9, "tick": 7})


def test_a_host_that_is_down_backs_off_alone():
    """One unreachable host made the whole fleet poll every 10 s (its backoff), the live
    hosts' figures 10 s old under a "● live" status."""
    live = ScriptedDaemon("live", TICK)
    down = ScriptedDaemon("down", DaemonUnavailable("no mlcostd at unix:/nowhere"))
    source = LiveSource([live, down], interval_s=1.0)  # type: ignore[list-item]

    async def polls() -> list[float]:
        delays = []
        for _ in range(5):
            hosts = await source.fetch_all()
            assert hosts[0].now is TICK and hosts[0].error is None
            assert hosts[1].error is not None and "no mlcostd" in hosts[1].error
            delays.append(source.retry_delay(starting=False))
            source._due_at = [0.0, 0.0]  # (as if the delay had passed for both)
        return delays

    assert asyncio.run(polls()) == [1.0] * 5  # the live host is due every interval
    assert source.failures == [0, 5]
    # and the host that is down waits its own backoff: not asked while it is not due
    source._due_at = [0.0, float("inf")]
    asked = len(down.answers)
    asyncio.run(source.fetch_all())
    assert source.failures == [0, 5] and len(down.answers) == asked


def test_a_host_that_hangs_does_not_hold_the_others_back():
    """A host that takes the request and never answers: the poll returns the live host's
    answer after at most an interval, showing the hung one as it last was; its answer, when
    it comes, is taken at a later poll."""
    release = asyncio.Event()

    class Hung(ScriptedDaemon):
        async def now(self) -> Now:
            await release.wait()
            return TICK

    live = ScriptedDaemon("live", TICK)
    hung = Hung("hung", TICK)
    source = LiveSource([live, hung], interval_s=0.2)  # type: ignore[list-item]

    async def polls() -> None:
        first = await source.fetch_all()
        assert first[0].now is TICK
        assert first[1].now is None and first[1].error == "waiting for its first answer"
        assert source.retry_delay(starting=False) <= 0.2  # looked at again within an interval
        release.set()
        await asyncio.sleep(0)  # (the hung host's answer comes in)
        second = await source.fetch_all()
        assert second[1].now is TICK and second[1].error is None
        await source.close()

    asyncio.run(polls())


def test_a_host_already_due_is_polled_soon_but_never_with_no_delay():
    """A delay of 0 reached Textual's set_timer, whose timer then raised ZeroDivisionError
    and never fired: the view froze on its first figures."""
    source = LiveSource([ScriptedDaemon("a", TICK), ScriptedDaemon("b", TICK)],  # type: ignore[list-item]
                        interval_s=1.0)
    asyncio.run(source.fetch_all())
    source.retry_delay(starting=False)
    source._due_at = [0.0, 0.0]  # both overdue
    assert source.retry_delay(starting=False) == SOONEST_POLL_S > 0
