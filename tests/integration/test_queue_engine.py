"""The queue engine's boundary (`zilean/queue_engine/`): PgQueuer 1.6 as we run it.

Real consumers on the test's database. Faults are made the way they happen: backends
terminated, a backend frozen (SIGSTOP) for a half-open connection, a table missing.
Whole-process faults (SIGKILL, Postgres restarts and outages) are in
`tests/acceptance/test_worker_faults.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pgqueuer.adapters.persistence.qb import (
    QueryBuilderEnvironment,
    QueryQueueBuilder,
    QuerySchedulerBuilder,
)
from pgqueuer.adapters.persistence.queries import Queries
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.queue_engine import consuming, strand
from zilean.db.engine import driver_connection
from zilean.db.urls import libpq_url
from zilean.execution.hot_path import HotConnections
from zilean.queue_engine.consumer import Delivery, QueueConsumer, RetryLater
from zilean.queue_engine.driver import ResilientDriver
from zilean.queue_engine.statements import (
    NewQueueJob,
    QueueJobState,
    cancel_waiting,
    channel_for,
    enqueue,
    queue_job_states,
    queue_jobs,
    unfinished,
)
from zilean.queue_engine.stock import engine_settings


class Recorder:
    """A handler that records each delivery and when it started."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.started_at: list[datetime] = []
        self._changed = asyncio.Event()

    async def __call__(self, delivery: Delivery) -> None:
        self.started_at.append(datetime.now(UTC))
        self.deliveries.append(delivery)
        self._changed.set()

    async def wait_for(self, count: int, within: float = 5.0) -> None:
        async with asyncio.timeout(within):
            while len(self.deliveries) < count:
                self._changed.clear()
                await self._changed.wait()


async def insert(engine: AsyncEngine, *jobs: NewQueueJob) -> list[int]:
    async with engine.begin() as conn:
        return await enqueue(await driver_connection(conn), list(jobs))


async def states(engine: AsyncEngine) -> list[QueueJobState]:
    async with engine.connect() as conn:
        return [state for _, state in await queue_job_states(await driver_connection(conn))]


async def waiting_and_running(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return await unfinished(await driver_connection(conn))


def backends(database_url: str, application_name: str, query_like: str = "%") -> list[int]:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND query LIKE %s",
            (application_name, query_like),
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def terminate(database_url: str, pids: list[int]) -> None:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


@contextlib.contextmanager
def frozen(pids: list[int]) -> Iterator[None]:
    """Stop these backends (a server that no longer answers); resume them after."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


async def until(condition: Any, within: float = 10.0) -> None:
    """Poll a condition on the database (nothing to await for it) until it holds."""
    async with asyncio.timeout(within):
        while not await condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


# --- Inserting ---------------------------------------------------------------------


async def test_enqueue_returns_ids_in_input_order_with_payload_priority_and_due_time(
    engine: AsyncEngine,
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    ids = await insert(
        engine,
        NewQueueJob("scripts-groovy", b"first", priority=1, due_at=later),
        NewQueueJob("default", b"second"),
        NewQueueJob("default", b"\x00third"),
    )
    assert ids == sorted(ids)
    async with engine.connect() as conn:
        rows = await queue_jobs(await driver_connection(conn))
    assert [(row["id"], row["queue"], row["payload"]) for row in rows] == [
        (ids[0], "scripts-groovy", b"first"),
        (ids[1], "default", b"second"),
        (ids[2], "default", b"\x00third"),
    ]
    assert [row["priority"] for row in rows] == [1, 0, 0]
    assert rows[0]["execute_after"] == later
    assert {row["status"] for row in rows} == {"queued"}
    assert await states(engine) == [QueueJobState.QUEUED] * 3


async def test_a_rolled_back_transaction_queues_nothing(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        transaction = await conn.begin()
        await enqueue(await driver_connection(conn), [NewQueueJob("default", b"x")])
        await transaction.rollback()  # the caller's other write failed
    assert await states(engine) == []


async def test_the_schema_is_pgqueuers_own_but_for_the_per_queue_notify_triggers(
    database_url: str,
) -> None:
    """PgQueuer's upgrade planner, at the pinned version, wants only its catch-all NOTIFY
    trigger back, which revision 0009 replaced on purpose."""
    settings = engine_settings(channel_for("default"))
    driver = ResilientDriver(libpq_url(database_url), application_name="zilean-test-schema")
    queries = Queries(
        driver,
        qbe=QueryBuilderEnvironment(settings),
        qbq=QueryQueueBuilder(settings),
        qbs=QuerySchedulerBuilder(settings),
    )
    try:
        plan = await queries.plan_upgrade()
    finally:
        await driver.close()
    assert [statement.split("(")[0].split("\n")[0] for statement in plan.statements] == [
        "CREATE FUNCTION fn_pgqueuer_changed",
        "CREATE TRIGGER tg_pgqueuer_changed",
    ]


async def test_only_inserts_and_requeues_notify_the_queue_channel(
    engine: AsyncEngine, database_url: str
) -> None:
    """Claims, heartbeats, deletions and inserts made already claimed make nothing due:
    their statements notify nobody (revisions 0009, 0014 and 0015). Notifications arrive
    in commit order, so the re-queue that ends the sequence shows that nothing came
    before it but what the test expects."""
    listener = await psycopg.AsyncConnection.connect(libpq_url(database_url), autocommit=True)
    try:
        await listener.execute(f'LISTEN "{channel_for("default")}"')
        waiting, claimed = await insert(
            engine, NewQueueJob("default", b"x"), NewQueueJob("default", b"y")
        )
        async with engine.begin() as conn:
            raw = await driver_connection(conn)
            await raw.execute(
                "UPDATE pgqueuer SET status = 'picked', heartbeat = now() WHERE id = %s",
                (claimed,),
            )
            await raw.execute("UPDATE pgqueuer SET heartbeat = now() WHERE id = %s", (claimed,))
            assert await cancel_waiting(raw, waiting)
            await raw.execute("DELETE FROM pgqueuer WHERE id = %s", (claimed,))
            cursor = await raw.execute(
                "INSERT INTO pgqueuer (priority, entrypoint, payload, status, queue_manager_id) "
                "VALUES (1, 'default', 'w', 'picked', gen_random_uuid()) RETURNING id"
            )
            adopted = await cursor.fetchone()
        async with engine.begin() as conn:
            raw = await driver_connection(conn)
            await raw.execute("UPDATE pgqueuer SET status = 'queued' WHERE id = %s", adopted)
        operations = []
        async with asyncio.timeout(10.0):
            async for notice in listener.notifies():
                operations.append(json.loads(notice.payload)["operation"])
                if len(operations) == 2:
                    break
    finally:
        await listener.close()
    assert operations == ["insert", "update"]  # the first insert's, then the re-queue's


# --- Consuming ---------------------------------------------------------------------


async def test_a_consumer_is_woken_by_the_insert_and_gets_the_payload(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()
    async with consuming(database_url, recorder):
        queued_at = datetime.now(UTC)
        [queue_job_id] = await insert(engine, NewQueueJob("default", b'{"a": [1]}'))
        await recorder.wait_for(1, within=2.0)  # the NOTIFY, not the 30 s backstop
        await until(lambda: _no_unfinished(engine))
    [delivery] = recorder.deliveries
    assert (delivery.queue_job_id, delivery.queue, delivery.payload) == (
        queue_job_id,
        "default",
        b'{"a": [1]}',
    )
    assert delivery.retries == 0
    assert recorder.started_at[0] - queued_at < timedelta(seconds=1)
    assert await states(engine) == [QueueJobState.FINISHED]


@pytest.mark.usefixtures("frozen_heap")
async def test_a_deferred_job_starts_at_its_due_time(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()
    async with consuming(database_url, recorder):
        async with engine.connect() as conn:
            now = (await conn.execute(text("SELECT now()"))).scalar_one()
        due = [now + timedelta(milliseconds=ms) for ms in (300, 50, 700)]
        await insert(engine, *(NewQueueJob("default", b"x", due_at=at) for at in due))
        await recorder.wait_for(3)
    lateness = [
        (started - delivery.due_at).total_seconds()
        for started, delivery in zip(recorder.started_at, recorder.deliveries, strict=True)
    ]
    # PgQueuer alone would start the 50 ms job at 100 ms; ours wait exactly.
    assert all(0 <= late < 0.050 for late in lateness), lateness
    assert sorted(delivery.due_at for delivery in recorder.deliveries) == sorted(due)


async def test_only_its_own_queue_wakes_a_consumer(engine: AsyncEngine, database_url: str) -> None:
    """Claims, heartbeats and completions on one queue do not wake another queue's
    workers: each would otherwise query the database on every change."""
    busy = Recorder()
    async with (
        consuming(database_url, Recorder(), queue="scripts-bash") as idle,
        consuming(database_url, busy),
    ):
        assert idle.driver is not None
        before = idle.driver.statements_sent
        for _ in range(30):
            await insert(engine, NewQueueJob("default", b"x"))
        await busy.wait_for(30)
        await until(lambda: _no_unfinished(engine))
        woken = idle.driver.statements_sent - before
    assert woken <= 2  # at most its own periodic listener checks


async def test_a_batch_is_claimed_and_settled_in_a_statement_each(
    engine: AsyncEngine, database_url: str
) -> None:
    """Ten jobs, ten slots: one turn claims them all, the turn after their handlers end
    writes all ten ends (and finds nothing more to claim)."""
    recorder = Recorder()
    async with consuming(database_url, recorder, concurrency=10) as consumer:
        assert consumer.driver is not None
        before = consumer.driver.statements_sent
        await insert(engine, *(NewQueueJob("default", b"x") for _ in range(10)))
        await recorder.wait_for(10)
        await until(lambda: _states_are(engine, [QueueJobState.FINISHED] * 10))
        sent = consumer.driver.statements_sent - before
    assert sent <= 3  # the claim, the settling turn, and at most one listener probe


async def test_a_deleted_job_does_not_wake_the_consumer(
    engine: AsyncEngine, database_url: str
) -> None:
    """A cancelled job (a deletion's notification) makes nothing due: no turn is taken."""
    later = datetime.now(UTC) + timedelta(hours=1)
    ids = await insert(engine, *(NewQueueJob("default", b"x", due_at=later) for _ in range(5)))
    recorder = Recorder()
    async with consuming(database_url, recorder) as consumer:
        assert consumer.driver is not None
        before = consumer.driver.statements_sent
        for queue_job_id in ids:
            async with engine.begin() as conn:
                assert await cancel_waiting(await driver_connection(conn), queue_job_id)
        # Notifications on a channel arrive in order: once this job has run and settled,
        # any turn the deletions caused has been taken.
        await insert(engine, NewQueueJob("default", b"x"))
        await recorder.wait_for(1)
        await until(lambda: _no_unfinished(engine))
        sent = consumer.driver.statements_sent - before
    assert sent <= 3  # the claim, the settling turn, and at most one listener probe


async def test_a_retry_later_delivers_the_job_again_after_the_delay(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()

    async def once_later(delivery: Delivery) -> None:
        await recorder(delivery)
        if delivery.retries == 0:
            raise RetryLater(0.3, "not yet")

    async with consuming(database_url, once_later):
        await insert(engine, NewQueueJob("default", b"x"))
        await recorder.wait_for(2)
        await until(lambda: _no_unfinished(engine))
    first, second = recorder.deliveries
    assert (first.queue_job_id, first.retries) == (second.queue_job_id, 0)
    assert second.retries == 1
    gap = (recorder.started_at[1] - recorder.started_at[0]).total_seconds()
    assert 0.3 <= gap < 0.35
    assert await states(engine) == [QueueJobState.FINISHED]


async def test_a_handler_that_raises_leaves_its_job_held_as_failed(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()

    async def broken(delivery: Delivery) -> None:
        await recorder(delivery)
        raise RuntimeError("a bug")

    async with consuming(database_url, broken):
        await insert(engine, NewQueueJob("default", b"x"))
        await until(lambda: _states_are(engine, [QueueJobState.FAILED]))
    assert len(recorder.deliveries) == 1  # held for inspection, not delivered again


async def test_a_claim_whose_worker_died_is_picked_again_after_the_heartbeat_timeout(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()
    await insert(engine, NewQueueJob("default", b"x"))
    stranded_at = datetime.now(UTC)  # before the database stamps the heartbeat
    [queue_job_id] = await strand(engine, heartbeat_age=0.0)  # claimed just now, then lost
    async with consuming(database_url, recorder, heartbeat_timeout=1.0):
        await recorder.wait_for(1)
    [delivery] = recorder.deliveries
    assert delivery.queue_job_id == queue_job_id
    waited = (recorder.started_at[0] - stranded_at).total_seconds()
    assert 1.0 <= waited < 1.5  # woken when the claim went stale, not by a poll


async def test_a_running_job_keeps_its_claim_past_the_heartbeat_timeout(
    engine: AsyncEngine, database_url: str
) -> None:
    release = asyncio.Event()
    recorder = Recorder()

    async def slow(delivery: Delivery) -> None:
        await recorder(delivery)
        await release.wait()

    async with (
        consuming(database_url, slow, heartbeat_timeout=0.5),
        consuming(database_url, recorder, heartbeat_timeout=0.5),
    ):
        await insert(engine, NewQueueJob("default", b"x"))
        await recorder.wait_for(1)
        await asyncio.sleep(1.5)  # three heartbeat timeouts of running: nothing may happen
        release.set()
        await until(lambda: _no_unfinished(engine))
    assert len(recorder.deliveries) == 1  # neither consumer took it from the other


# --- Connection faults ---------------------------------------------------------------


async def test_killed_connections_are_replaced_and_the_listener_wakes_at_once(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()
    async with consuming(database_url, recorder) as consumer:
        assert consumer.driver is not None
        terminate(database_url, backends(database_url, "zilean-test-default"))
        await until(lambda: _listening_again(consumer))
        queued_at = datetime.now(UTC)
        await insert(engine, NewQueueJob("default", b"x"))
        await recorder.wait_for(1, within=2.0)
        await until(lambda: _no_unfinished(engine))
    assert recorder.started_at[0] - queued_at < timedelta(seconds=1)
    assert consumer.driver.reconnects >= 1


async def test_a_frozen_listener_is_found_by_its_probe_and_replaced(
    engine: AsyncEngine, database_url: str
) -> None:
    recorder = Recorder()
    probe_quickly = {"probe_interval": 0.5, "probe_timeout": 0.5}
    async with consuming(database_url, recorder, driver_options=probe_quickly) as consumer:
        assert consumer.driver is not None
        [listener] = backends(database_url, "zilean-test-default", "LISTEN%")
        with frozen([listener]):
            await until(lambda: _listening_again(consumer), within=5.0)
            await insert(engine, NewQueueJob("default", b"x"))
            await recorder.wait_for(1, within=2.0)
            await until(lambda: _no_unfinished(engine))


async def test_a_statement_on_a_frozen_backend_is_severed_and_sent_again(
    database_url: str,
) -> None:
    driver = ResilientDriver(
        libpq_url(database_url), application_name="zilean-test-frozen", statement_timeout=0.5
    )
    try:
        assert await driver.fetch("SELECT 1 AS one") == [{"one": 1}]
        pids = backends(database_url, "zilean-test-frozen")
        with frozen(pids):
            started = asyncio.get_running_loop().time()
            assert await driver.fetch("SELECT 2 AS two") == [{"two": 2}]
            took = asyncio.get_running_loop().time() - started
    finally:
        await driver.close()
    assert 0.5 <= took < 2.0  # the deadline, then a fresh connection
    assert backends(database_url, "zilean-test-frozen") != pids


async def test_the_attempt_path_severs_a_frozen_connection_too(database_url: str) -> None:
    hot = HotConnections(database_url, max_size=1, statement_timeout=0.5)
    try:
        assert await hot.fetch_first("SELECT 1 AS one", {}) == {"one": 1}
        with frozen(backends(database_url, "zilean-worker")):
            assert await hot.fetch_first("SELECT 2 AS two", {}) == {"two": 2}
    finally:
        await hot.close()


async def test_a_queue_manager_that_fails_is_replaced(
    engine: AsyncEngine, database_url: str
) -> None:
    async with engine.begin() as conn:  # PgQueuer refuses to start without its log table
        await conn.execute(text("ALTER TABLE pgqueuer_log RENAME TO pgqueuer_log_away"))
    recorder = Recorder()
    async with consuming(database_url, recorder, started=False) as consumer:
        await until(lambda: _restarted(consumer))
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE pgqueuer_log_away RENAME TO pgqueuer_log"))
        await insert(engine, NewQueueJob("default", b"x"))
        await recorder.wait_for(1)
    assert consumer.restarts >= 1


# --- Stopping ------------------------------------------------------------------------


async def test_stopping_drains_then_hands_over_what_still_runs_without_finishing_it(
    engine: AsyncEngine, database_url: str
) -> None:
    never = asyncio.Event()
    overrun: list[Delivery] = []

    async def quick_or_stuck(delivery: Delivery) -> None:
        if delivery.payload == b"stuck":
            await never.wait()

    async def record_overrun(deliveries: list[Delivery]) -> None:
        overrun.extend(deliveries)

    [quick, stuck] = await insert(
        engine, NewQueueJob("default", b"quick"), NewQueueJob("default", b"stuck")
    )
    async with consuming(database_url, quick_or_stuck, soft_stop=0.5, on_overrun=record_overrun):
        await until(lambda: _states_are(engine, [QueueJobState.FINISHED, QueueJobState.RUNNING]))
    assert [delivery.queue_job_id for delivery in overrun] == [stuck]
    # Still claimed: the next worker to pick it up after the heartbeat timeout decides.
    async with engine.connect() as conn:
        rows = await queue_jobs(await driver_connection(conn))
    assert [(row["id"], row["status"]) for row in rows] == [(stuck, "picked")]
    assert quick < stuck


async def test_a_consumer_with_concurrency_one_runs_one_job_at_a_time(
    engine: AsyncEngine, database_url: str
) -> None:
    running = 0
    most = 0

    async def counted(delivery: Delivery) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        running -= 1

    async with consuming(database_url, counted, concurrency=1):
        await insert(engine, *(NewQueueJob("default", b"x") for _ in range(4)))
        await until(lambda: _no_unfinished(engine))
    assert most == 1


async def _no_unfinished(engine: AsyncEngine) -> bool:
    return await waiting_and_running(engine) == 0


async def _states_are(engine: AsyncEngine, expected: list[QueueJobState]) -> bool:
    return await states(engine) == expected


async def _listening_again(consumer: QueueConsumer) -> bool:
    return consumer.driver is not None and consumer.driver.listener_attachments >= 2


async def _restarted(consumer: QueueConsumer) -> bool:
    return consumer.restarts >= 1
