"""The last-resort bound on an attempt that outlives its own timeout."""

from __future__ import annotations

import asyncio

import pytest

from zilean.execution.attempt import AttemptAbandoned, run_with_safety_net


async def test_an_attempt_stuck_past_the_safety_net_is_cancelled_and_abandoned() -> None:
    never = asyncio.Event()
    abandoned: list[bool] = []

    async def stuck() -> None:
        await never.wait()

    async def abandon() -> None:
        abandoned.append(True)

    with pytest.raises(AttemptAbandoned):
        await run_with_safety_net(stuck(), 0.05, on_abandon=abandon)
    assert abandoned == [True]


async def test_an_attempt_within_the_safety_net_is_left_alone() -> None:
    abandoned: list[bool] = []

    async def quick() -> str:
        return "done"

    async def abandon() -> None:
        abandoned.append(True)

    await run_with_safety_net(quick(), 5.0, on_abandon=abandon)
    assert abandoned == []
