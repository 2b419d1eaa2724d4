"""Delays the row asks for are the delays the endpoint sees, measured with a live worker.

Measured where a user would look: the times the target received each request. The gap
between two calls is the row's delay plus the first call's own duration and recording
(a millisecond or two here), and the worker's wake-up lateness, which must stay small.
"""

from __future__ import annotations

import itertools

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast
from tests.support.attempts import attempts, http_job, remaining, run_now, settled, worker_for
from tests.support.target import ScriptedResponse, http_target

TOLERANCE = 0.050  # seconds a gap may exceed what the row says

pytestmark = pytest.mark.usefixtures("frozen_heap")


def gaps(received: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(received)]


async def test_a_loop_with_a_300_ms_delay_calls_every_300_ms(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(*(remaining(count) for count in (4, 3, 2, 1, 0)))
        job = await http_job(
            core_app, cast.alice.session, target, loop_enabled=True, loop_delay_ms=300
        )
        async with worker_for(database_url) as worker:
            await run_now(core_app, cast.alice.session, job["id"])
            await worker.drain(lambda: settled(engine))
    received = [request.received_at for request in target.requests]
    assert len(received) == 5
    measured = gaps(received)
    assert all(0.300 <= gap <= 0.300 + TOLERANCE for gap in measured), measured
    assert [row["loop_iteration"] for row in await attempts(engine, job["id"])] == [0, 1, 2, 3, 4]


async def test_a_retry_chain_with_a_300_ms_base_backs_off_on_time(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(*(ScriptedResponse(status=503, body=b"busy") for _ in range(4)))
        job = await http_job(
            core_app, cast.alice.session, target,
            retry_base_delay_ms=300, retry_multiplier=2, retry_max_attempts=4,
        )  # fmt: skip
        async with worker_for(database_url) as worker:
            await run_now(core_app, cast.alice.session, job["id"])
            await worker.drain(lambda: settled(engine))
    received = [request.received_at for request in target.requests]
    measured = gaps(received)
    waits = [0.300, 0.600, 1.200]  # base × 2^(n−1)
    assert len(measured) == len(waits)
    for gap, wait in zip(measured, waits, strict=True):
        assert wait <= gap <= wait + TOLERANCE, measured
    rows = await attempts(engine, job["id"])
    assert [(row["attempt"], row["state"]) for row in rows] == [
        (1, "retrying"), (2, "retrying"), (3, "retrying"), (4, "failed")
    ]  # fmt: skip
