"""Shared fixtures: a real Postgres per session and a fresh migrated database per test.

The server is an embedded Postgres in a temporary directory, or the server behind
TEST_DATABASE_URL (an admin URL) when set. Each test gets its own database cloned
from a migrated template, so tests see real behaviour and never share rows.
"""

from __future__ import annotations

import gc
import itertools
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.embedded import create_database, embedded_postgres
from zilean.db.engine import create_engine
from zilean.db.migrate import migrate
from zilean.db.urls import with_database
from zilean.logs import configure_logging

TEMPLATE_DATABASE = "zilean_template"
_database_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """An admin URL to a real Postgres server for the whole session."""
    external = os.environ.get("TEST_DATABASE_URL")
    if external:
        yield external
        return
    with (
        tempfile.TemporaryDirectory(prefix="zilean-test-pg-") as tmp,
        embedded_postgres(Path(tmp) / "pgdata", database="postgres") as url,
    ):
        yield url


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def template_database(postgres_admin_url: str) -> str:
    """A database migrated to the newest revision, cloned by every test."""
    drop_database(postgres_admin_url, TEMPLATE_DATABASE)
    create_database(postgres_admin_url, TEMPLATE_DATABASE)
    migrate(with_database(postgres_admin_url, TEMPLATE_DATABASE))
    return TEMPLATE_DATABASE


def new_database(admin_url: str, *, template: str | None = None) -> str:
    name = f"zilean_test_{os.getpid()}_{next(_database_numbers)}"
    create_database(admin_url, name, template=template)
    return name


@pytest.fixture
def database_url(postgres_admin_url: str, template_database: str) -> Iterator[str]:
    """A URL to a fresh, fully migrated database of this test's own."""
    name = new_database(postgres_admin_url, template=template_database)
    yield with_database(postgres_admin_url, name)
    drop_database(postgres_admin_url, name)


@pytest.fixture
def empty_database_url(postgres_admin_url: str) -> Iterator[str]:
    """A URL to a fresh database with no schema at all."""
    name = new_database(postgres_admin_url)
    yield with_database(postgres_admin_url, name)
    drop_database(postgres_admin_url, name)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """Keep the test process's garbage collector from pausing a timed test.

    Late in the suite this process holds a few hundred thousand objects, and one full
    collection of them stops every thread (the in-process worker's and the target's)
    for 236-361 ms: far more than the lateness a timing test allows, and nothing a
    worker process pays, since a worker freezes its own start-up heap
    (`services/heap.py`). Frozen here, a collection covers only what the test makes.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def pytest_configure(config: pytest.Config) -> None:
    # Route structlog through the standard library so `caplog` sees our log events.
    configure_logging("test", json_output=True)
