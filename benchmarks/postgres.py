"""The suite's own Postgres: an embedded server in the run's temporary directory.

Migrations run once, into a template database that also holds the benchmark's Super
Admin and a session for it; every scenario then works in its own clone, so scenarios
never see each other's rows, and a subject and its baseline share one database.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from benchmarks.seeding import seed_admin
from zilean.db.embedded import create_database, embedded_postgres
from zilean.db.engine import create_engine
from zilean.db.migrate import migrate
from zilean.db.urls import with_database

TEMPLATE = "bench_template"


@dataclass
class BenchPostgres:
    """A server, its migrated template and the admin session every clone holds.

    `pgdata` is None for a server the suite did not start (the test suite's, say); its
    processes are then left out of CPU figures.
    """

    admin_url: str
    session: str
    pgdata: Path | None = None
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def postmaster_pid(self) -> int | None:
        """The server's main process id, from its `postmaster.pid` file, when known."""
        if self.pgdata is None:
            return None
        return int((self.pgdata / "postmaster.pid").read_text().split()[0])

    def clone(self, label: str) -> str:
        """Create a fresh database from the template; return its URL."""
        return self._create(label, TEMPLATE)

    def empty(self, label: str) -> str:
        """Create a database with no schema at all (the alternative's); return its URL."""
        return self._create(label, None)

    def _create(self, label: str, template: str | None) -> str:
        name = f"bench_{next(self._numbers):02d}_{label}"
        # A server the suite did not start may still hold one from an interrupted run.
        drop_database(self.admin_url, name)
        create_database(self.admin_url, name, template=template)
        return with_database(self.admin_url, name)

    def drop(self, url: str) -> None:
        """Drop a clone, disconnecting whatever still uses it."""
        drop_database(self.admin_url, url.rsplit("/", 1)[1].split("?", 1)[0])


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


async def _seed_template(url: str) -> str:
    engine = create_engine(url)
    try:
        return await seed_admin(engine)
    finally:
        await engine.dispose()


def prepare(admin_url: str, pgdata: Path | None = None) -> BenchPostgres:
    """(Re)create the migrated template on the server at `admin_url`; call outside any loop."""
    drop_database(admin_url, TEMPLATE)
    create_database(admin_url, TEMPLATE)
    template_url = with_database(admin_url, TEMPLATE)
    migrate(template_url)
    return BenchPostgres(admin_url, asyncio.run(_seed_template(template_url)), pgdata)


async def prepare_async(admin_url: str) -> BenchPostgres:
    """`prepare` from inside a running event loop (the blocking steps run in a thread)."""
    drop_database(admin_url, TEMPLATE)
    create_database(admin_url, TEMPLATE)
    template_url = with_database(admin_url, TEMPLATE)
    await asyncio.to_thread(migrate, template_url)
    return BenchPostgres(admin_url, await _seed_template(template_url))


@contextmanager
def bench_postgres(workdir: Path) -> Iterator[BenchPostgres]:
    """Start a server in `workdir`, prepare its template, stop the server on exit."""
    pgdata = workdir / "pgdata"
    with embedded_postgres(pgdata, database="postgres") as admin_url:
        yield prepare(admin_url, pgdata)
