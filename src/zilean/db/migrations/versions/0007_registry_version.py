"""A registry version that every schedule-relevant change bumps in its own transaction.

The scheduler's periodic reconcile (the backstop for a missed NOTIFY) reads this one
row first and re-reads the jobs only when it moved, so an idle tick costs one indexed
read whatever the number of jobs. The same triggers that NOTIFY `zilean_jobs` bump it,
so it moves on exactly the changes the scheduler reacts to; being transactional, it
cannot be missed the way a notification can.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

CHANNEL = "zilean_jobs"
# Once per transaction, however many rows it changes: a bulk edit must not pile up dead
# versions of this one row (which an idle reconcile scans) or re-lock it per row.
BUMP = """
            IF current_setting('zilean.registry_bumped', true)
                    IS DISTINCT FROM txid_current()::text THEN
                UPDATE registry_version SET version = version + 1 WHERE id = 1;
                PERFORM set_config('zilean.registry_bumped', txid_current()::text, true);
            END IF;"""


def _notify_functions(prelude: str) -> None:
    """(Re)define revision 0005's two trigger functions, each starting with `prelude`."""
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION zilean_notify_job_row() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            {prelude}
            IF TG_OP = 'DELETE' THEN
                PERFORM pg_notify('{CHANNEL}', OLD.id::text);
            ELSE
                PERFORM pg_notify('{CHANNEL}', NEW.id::text);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION zilean_notify_jobs_all() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            {prelude}
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END
        $$
        """
    )


def upgrade() -> None:
    op.create_table(
        "registry_version",
        sa.Column("id", sa.SmallInteger(), server_default="1", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="0", nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_registry_version_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_registry_version")),
    )
    op.execute("INSERT INTO registry_version (id, version) VALUES (1, 0)")
    _notify_functions(BUMP)


def downgrade() -> None:
    _notify_functions("")  # revision 0005's bodies
    op.drop_table("registry_version")
