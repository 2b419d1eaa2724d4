from __future__ import annotations

import asyncio
import logging
import threading

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from zilean.db.migrate import head_revision, migrate
from zilean.db.schema import HEAD_REVISION, schema_status, wait_for_schema
from zilean.db.tables import metadata
from zilean.db.urls import sqlalchemy_url
from zilean.errors import SchemaError


def test_migrations_produce_exactly_the_schema_the_code_expects(database_url: str) -> None:
    engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    # Procrastinate owns its tables; only ours are compared.
                    "include_name": lambda name, kind, _parent: (
                        not (kind == "table" and (name or "").startswith("procrastinate_"))
                    ),
                    "compare_server_default": True,
                },
            )
            differences = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_procrastinate_schema_is_applied(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_name LIKE 'procrastinate_%'"
            )
        }
    assert {"procrastinate_jobs", "procrastinate_workers", "procrastinate_events"} <= tables


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
