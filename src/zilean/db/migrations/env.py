"""Alembic environment: always driven by `zilean.db.migrate`, which passes a locked connection."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from zilean.db.tables import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("run migrations with `zilean migrate`, not the alembic command")

context.configure(
    connection=connection,
    target_metadata=metadata,
    # One transaction per revision: a failing revision rolls back whole and
    # leaves the recorded revision at the last one that succeeded.
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
