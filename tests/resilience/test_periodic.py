"""The sweepers' background loop (modelgate.periodic): a failing round is logged and the loop goes
on; stop ends it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from modelgate.periodic import Periodic


async def test_a_failing_round_is_logged_and_the_next_round_runs(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []
    third = asyncio.Event()

    async def round_() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("database hiccup")
        if len(rounds) == 3:
            third.set()

    loop = Periodic("test sweep", round_, 0.0, logging.getLogger("modelgate.test"))
    with caplog.at_level(logging.WARNING, logger="modelgate.test"):
        loop.start()
        loop.start()  # a second start does not start a second loop
        await asyncio.wait_for(third.wait(), timeout=10)
        await loop.stop()
    assert rounds[:3] == [0, 1, 2]
    failures = [r for r in caplog.records if "test sweep failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    ran = len(rounds)
    await asyncio.sleep(0.01)
    assert len(rounds) == ran  # stopped: no round after stop
    await loop.stop()  # stopping twice is harmless
