"""A skip job's overlap lock across a run: refreshed by an attempt only once it is over a
minute old, so back-to-back attempts leave the job row alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_attempts_reconnect import a_runner, queued_attempts
from tests.support.actors import Cast
from tests.support.attempts import http_job, locks, run_now
from tests.support.target import ScriptedResponse, http_target
from zilean.execution.recording import AttemptState

MORE = ScriptedResponse(body=b'{"result":{"remaining":1}}')


async def test_a_lock_is_refreshed_when_over_a_minute_old_and_left_alone_when_fresh(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(MORE, MORE)
        job = await http_job(
            core_app,
            cast.alice.session,
            target,
            overlap_policy="skip",
            loop_enabled=True,
            loop_delay_ms=0,
            loop_max_iterations=3,
        )
        await run_now(core_app, cast.alice.session, job["id"])
        old = (datetime.now(UTC) - timedelta(minutes=2)).isoformat()
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE scheduled_jobs SET running_since_by_pool = :locks WHERE id = :id"),
                {"locks": f'{{"0": "{old}"}}', "id": job["id"]},
            )
        async with a_runner(database_url) as runner:
            [(queued, args)] = await queued_attempts(engine)
            assert await runner.run(queued, args) is AttemptState.SUCCEEDED
            refreshed = (await locks(engine, job["id"]))["0"]
            assert datetime.now(UTC) - datetime.fromisoformat(refreshed) < timedelta(seconds=30)
            [(queued, args)] = await queued_attempts(engine)  # the loop's next iteration
            assert await runner.run(queued, args) is AttemptState.SUCCEEDED
            assert (await locks(engine, job["id"]))["0"] == refreshed  # fresh: left alone
    assert len(target.requests) == 2
