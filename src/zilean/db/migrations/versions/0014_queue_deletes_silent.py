"""Queue jobs that leave the table no longer notify anyone.

Revision 0009 notified each queue's channel on every deletion from `pgqueuer`, as
PgQueuer's own trigger does. Nothing falls due when a job finishes or is cancelled, so
every consumer ignored them, yet each settled batch still cost Postgres a notification
and woke the listener of every worker on that queue to read and drop it. Inserts, and
updates that queue a job again, still notify.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP TRIGGER zilean_queue_deleted ON pgqueuer")


def downgrade() -> None:
    op.execute(
        """
        CREATE TRIGGER zilean_queue_deleted AFTER DELETE ON pgqueuer
        REFERENCING OLD TABLE AS changed_rows
        FOR EACH STATEMENT EXECUTE FUNCTION zilean_queue_changed()
        """
    )
