"""At most one recorded attempt per queue job, so that recording is idempotent.

A worker retries its recording statement once when the connection turns out dead, and
the stalled-attempt reaper may race a slow worker; with this index the second write
records nothing. Duplicates written before it (only the reaper race could make them)
keep their earliest row.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        DELETE FROM job_attempts a
        USING job_attempts b
        WHERE a.queue_job_id = b.queue_job_id AND a.id > b.id
        """
    )
    op.create_index(
        "ux_job_attempts_queue_job_id",
        "job_attempts",
        ["queue_job_id"],
        unique=True,
        postgresql_where=sa.text("queue_job_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ux_job_attempts_queue_job_id", table_name="job_attempts")
