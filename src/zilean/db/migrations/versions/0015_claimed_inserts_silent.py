"""A queue job inserted already claimed no longer wakes the queue's workers.

A loop iteration due at once can be inserted claimed by the worker that recorded the
iteration before it, which then runs it itself (`execution/recording.py`). Nobody else
may take it, so the insert trigger of revision 0009 now notifies for inserted rows
only when they wait (`queued`), as it already did for updates.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE OR REPLACE FUNCTION zilean_queue_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'zilean.queue.' || changed.entrypoint,
        json_build_object(
            'channel', 'zilean.queue.' || changed.entrypoint,
            'operation', lower(TG_OP),
            'sent_at', now(),
            'table', TG_TABLE_NAME,
            'type', 'table_changed_event'
        )::text
    )
    FROM (
        SELECT DISTINCT entrypoint FROM changed_rows WHERE {only}
    ) AS changed;
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(_FUNCTION.format(only="status = 'queued'"))


def downgrade() -> None:
    op.execute(_FUNCTION.format(only="TG_OP <> 'UPDATE' OR status = 'queued'"))
