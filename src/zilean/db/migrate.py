"""Apply migrations: core only, at start-up (the others wait: `db/schema.py`).

Guarantees: at most one process migrates at a time (a Postgres advisory lock);
running again is a no-op; each revision commits whole or not at all. A database
whose recorded revision this code does not know, or that holds Zilean tables with no
revision recorded, stops start-up with a clear `SchemaError` instead of being touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.script.revision import ResolutionError
from alembic.util import CommandError
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import NullPool

from zilean.db.schema import first_line, single_revision
from zilean.db.urls import redacted, sqlalchemy_url
from zilean.errors import DatabaseUnavailable, SchemaError

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# "ZILEAN" in ASCII: the advisory lock every migrating process takes first.
MIGRATION_LOCK_KEY = 0x5A494C45414E


@dataclass(frozen=True)
class MigrationResult:
    before: str | None
    after: str

    @property
    def applied(self) -> bool:
        return self.before != self.after


def current_revision(connection: Connection) -> str | None:
    """The revision the database records, None when it records none."""
    if connection.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return None
    heads = connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
    return single_revision(list(heads))


def _alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def _check_known(connection: Connection, current: str | None) -> None:
    scripts = ScriptDirectory.from_config(_alembic_config())
    if current is not None:
        try:
            known = scripts.get_revision(current) is not None
        except (CommandError, ResolutionError):
            known = False
        if not known:
            raise SchemaError(
                f"the database schema is at revision {current}, which this version of Zilean "
                "does not know; run a newer Zilean or restore the database"
            )
        return
    leftovers = connection.execute(
        text(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = current_schema() "
            "AND (table_name IN ('users', 'app_settings', 'pgqueuer') "
            "OR table_name LIKE 'procrastinate_%')"
        )
    ).scalar_one()
    if leftovers:
        raise SchemaError(
            "the database holds Zilean tables but no recorded schema revision "
            "(a half-applied or hand-made schema); resolve by hand before starting"
        )


def _connect(engine: Engine, database_url: str) -> Connection:
    try:
        return engine.connect()
    except OperationalError as exc:
        raise DatabaseUnavailable(
            f"cannot reach the database at {redacted(database_url)}: {first_line(exc)}"
        ) from exc


def migrate(database_url: str) -> MigrationResult:
    """Bring the schema to the newest revision under the migration lock."""
    engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)
    try:
        with _connect(engine, database_url) as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()
            try:
                before = current_revision(connection)
                connection.commit()
                _check_known(connection, before)
                connection.commit()
                head = head_revision()
                if before != head:
                    try:
                        command.upgrade(_alembic_config(connection), "head")
                    except DBAPIError as exc:
                        connection.rollback()
                        reached = current_revision(connection)
                        raise SchemaError(
                            f"a migration failed and was rolled back; the schema stays at "
                            f"revision {reached or 'none'}: {exc.orig}"
                        ) from exc
                    connection.commit()
                after = current_revision(connection)
                assert after is not None
            finally:
                connection.rollback()
                connection.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
                connection.commit()
    finally:
        engine.dispose()
    result = MigrationResult(before=before, after=after)
    if result.applied:
        log.info(
            "migrations applied",
            action="db.migrations_applied",
            from_revision=before or "none",
            to_revision=after,
        )
    else:
        log.info("migrations already up to date", action="db.migrations_current", revision=after)
    return result
