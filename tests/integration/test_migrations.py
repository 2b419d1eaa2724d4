from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from psycopg.types.json import Jsonb
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from zilean.db.migrate import MIGRATIONS_DIR, head_revision, migrate
from zilean.db.schema import HEAD_REVISION, schema_status, wait_for_schema
from zilean.db.tables import metadata
from zilean.db.urls import sqlalchemy_url
from zilean.errors import SchemaError

JOB = "0b5f2a5e-8a49-4f4e-9c39-0f1c8d1e7a11"
ARGS = {"job_id": JOB, "loop_iteration": 0, "pool_index": 0, "max_attempts": 3, "attempt": 1,
        "trigger": "schedule", "webhook_hops": None, "webhook_payload": None,
        "webhook_metadata": None}  # fmt: skip


@contextlib.contextmanager
def alembic_on(database_url: str) -> Iterator[Config]:
    """Alembic's own config, on a connection to `database_url` (as `migrate` passes it)."""
    engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = connection
            yield config
            connection.commit()
    finally:
        engine.dispose()


def test_migrations_produce_exactly_the_schema_the_code_expects(database_url: str) -> None:
    engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    # The queue engine owns its tables (`test_queue_engine.py` checks them
                    # against PgQueuer's own declaration); only ours are compared.
                    "include_name": lambda name, kind, _parent: (
                        not (kind == "table" and (name or "").startswith("pgqueuer"))
                    ),
                    "compare_server_default": True,
                },
            )
            differences = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_a_database_from_the_procrastinate_era_moves_its_queue_across(
    empty_database_url: str,
) -> None:
    """Revision 0009 on a database that Procrastinate queued into, as the previous
    version left it: waiting and running attempts move with their ids, the running one
    gets its start marker, new ids start above every one used, Procrastinate is gone."""
    from procrastinate.schema import SchemaManager

    with alembic_on(empty_database_url) as config:
        command.upgrade(config, "0008")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema())  # what revision 0001 used to install
        conn.execute("INSERT INTO scheduled_jobs (id, name) VALUES (%s, 'j')", (JOB,))
        waiting, running, done = (
            conn.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args, scheduled_at)"
                " VALUES ('default', 'zilean.attempt', %s, %s) RETURNING id",
                (Jsonb(args), due),
            ).fetchone()[0]  # type: ignore[index]
            for args, due in [
                ({**ARGS, "attempt": 2}, None),
                (ARGS, None),
                (ARGS, None),
            ]
        )
        conn.execute("UPDATE procrastinate_jobs SET status = 'doing' WHERE id IN (%s, %s)",
                     (running, done))  # fmt: skip
        conn.execute("UPDATE procrastinate_jobs SET status = 'succeeded' WHERE id = %s", (done,))
        conn.execute(
            "INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts,"
            " trigger, pool_index, loop_iteration, attempted_at, finalized_at)"
            " VALUES (%s, %s, 'succeeded', 1, 3, 'schedule', 0, 0, now(), now())",
            (JOB, done + 1000),  # a recorded attempt's id above every queue job's
        )
    result = migrate(empty_database_url)
    assert (result.before, result.after) == ("0008", head_revision())
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        moved = conn.execute(
            "SELECT id, entrypoint, priority, status::text, convert_from(payload, 'UTF8')::jsonb"
            " FROM pgqueuer ORDER BY id"
        ).fetchall()
        markers = conn.execute(
            "SELECT queue_job_id, state, attempt FROM job_attempts ORDER BY queue_job_id"
        ).fetchall()
        next_id = conn.execute(
            "SELECT nextval(pg_get_serial_sequence('pgqueuer', 'id'))"
        ).fetchone()
        leftovers = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'procrastinate%'"
            " UNION ALL SELECT count(*) FROM pg_proc WHERE proname LIKE 'procrastinate%'"
            " UNION ALL SELECT count(*) FROM pg_type WHERE typname LIKE 'procrastinate%'"
        ).fetchall()
    assert moved == [
        (waiting, "default", 1, "queued", {**ARGS, "attempt": 2}),  # a retry keeps priority
        (running, "default", 0, "queued", ARGS),
    ]
    assert markers == [(running, "running", 1), (done + 1000, "succeeded", 1)]
    assert next_id == (done + 1001,)
    assert leftovers == [(0,), (0,), (0,)]


def test_revision_0011_tells_retried_failures_apart_and_fills_in_last_call(
    empty_database_url: str,
) -> None:
    with alembic_on(empty_database_url) as config:
        command.upgrade(config, "0009")
    old_call = {"method": "GET", "url": "https://h.example/", "status_code": 500,
                "duration_ms": 7, "response_snippet": "boom"}  # fmt: skip
    rows = [  # queue job id, state, attempt, budget, last_call as the old worker wrote them
        (1, "failed", 1, 3, old_call),  # retried: its number was below its budget
        (2, "failed", 3, 3, old_call),  # the budget spent: the run ended failed
        (3, "cancelled", 1, 1, None),  # a configuration error: no request was built
        (4, "running", 1, 3, None),  # still running: left alone
    ]
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduled_jobs (id, name, exec_timeout_ms) VALUES (%s, 'sync', 0)", (JOB,)
        )
        for queue_job_id, state, attempt, budget, last_call in rows:
            conn.execute(
                "INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts,"
                " trigger, pool_index, loop_iteration, attempted_at, duration_ms, error,"
                " last_call) VALUES (%s, %s, %s, %s, %s, 'schedule', 0, 0, now(), 7, %s, %s)",
                (JOB, queue_job_id, state, attempt, budget, f"error {queue_job_id}",
                 None if last_call is None else Jsonb(last_call)),
            )  # fmt: skip
    assert migrate(empty_database_url).after == head_revision()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        migrated = conn.execute(
            "SELECT queue_job_id, state, last_call FROM job_attempts ORDER BY queue_job_id"
        ).fetchall()
    shared = {"job_name": "sync", "timeout_ms": 60_000, "duration_ms": 7}
    no_request = {"method": None, "url": None, "status_code": None, "response_snippet": None}
    assert migrated == [
        (1, "retrying", {**shared, "error": "error 1", **old_call}),
        (2, "failed", {**shared, "error": "error 2", **old_call}),
        (3, "cancelled", {**shared, "error": "error 3", **no_request}),
        (4, "running", None),
    ]


def test_the_waiting_services_know_the_newest_revision() -> None:
    # Workers compare against this constant instead of loading Alembic.
    assert head_revision() == HEAD_REVISION


def test_migrating_twice_is_a_no_op_that_says_so(
    empty_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        first = migrate(empty_database_url)
        second = migrate(empty_database_url)
    assert (first.before, first.after) == (None, head_revision())
    assert first.applied
    assert not second.applied
    assert "migrations applied" in caplog.text
    assert "migrations already up to date" in caplog.text


def test_concurrent_migrations_serialise_on_the_advisory_lock(empty_database_url: str) -> None:
    results, errors = [], []

    def run() -> None:
        try:
            results.append(migrate(empty_database_url))
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sum(result.applied for result in results) == 1


def test_an_unknown_revision_stops_start_up(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(SchemaError, match="revision 9999_from_the_future"):
        migrate(database_url)


def test_tables_without_a_recorded_revision_stop_start_up(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("DROP TABLE alembic_version")
    with pytest.raises(SchemaError, match="no recorded schema revision"):
        migrate(database_url)


def test_a_failing_migration_rolls_back_and_reports_the_revision_kept(
    empty_database_url: str,
) -> None:
    # An index name already taken makes revision 0001 fail half-way through.
    with psycopg.connect(empty_database_url) as conn:
        conn.execute("CREATE TABLE unrelated (x int)")
        conn.execute("CREATE INDEX uq_users_bootstrap ON unrelated (x)")
    with pytest.raises(SchemaError, match="rolled back; the schema stays at revision none"):
        migrate(empty_database_url)
    with psycopg.connect(empty_database_url) as conn:
        users = conn.execute("SELECT to_regclass('users')").fetchone()
    assert users == (None,)


async def test_other_services_wait_until_the_schema_exists(
    empty_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert schema_status(empty_database_url) is not None
    with caplog.at_level(logging.INFO):
        waiter = asyncio.create_task(
            wait_for_schema(empty_database_url, interval=0.05, give_up_after=30)
        )
        done, _ = await asyncio.wait({waiter}, timeout=0.2)
        assert not done
        await asyncio.to_thread(migrate, empty_database_url)
        assert await asyncio.wait_for(waiter, timeout=30) is True
    assert "waiting for core to apply migrations" in caplog.text
    assert schema_status(empty_database_url) is None


async def test_waiting_ends_early_when_asked_to_stop(empty_database_url: str) -> None:
    stop = asyncio.Event()
    waiter = asyncio.create_task(wait_for_schema(empty_database_url, interval=30, stop=stop))
    stop.set()
    assert await asyncio.wait_for(waiter, timeout=10) is False


async def test_waiting_gives_up_only_when_asked_to(empty_database_url: str) -> None:
    with pytest.raises(SchemaError, match="gave up waiting"):
        await wait_for_schema(empty_database_url, interval=0.01, give_up_after=0.05)
