"""Wake the scheduler on registry edits: NOTIFY `zilean_jobs` from scheduled_jobs and groups.

A row insert or delete, or an update that changes a column the scheduler reads (enabled,
schedule_type, cron_expression, timezone, group_name), sends the job id as the payload.
A change to `disabled_groups`, or a truncate of either table, sends an empty payload: it
may affect any number of jobs. Postgres delivers notifications only on commit, so a
listener that reacts by re-reading rows sees the committed state.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

CHANNEL = "zilean_jobs"


def upgrade() -> None:
    op.execute(
        f"""
        CREATE FUNCTION zilean_notify_job_row() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
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
        CREATE FUNCTION zilean_notify_jobs_all() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER scheduled_jobs_notify_insert_delete
        AFTER INSERT OR DELETE ON scheduled_jobs
        FOR EACH ROW EXECUTE FUNCTION zilean_notify_job_row()
        """
    )
    # `UPDATE OF` fires whenever a column is assigned, even to its old value; the WHEN
    # clause keeps the per-attempt writes (locks, counters) and no-op saves silent.
    op.execute(
        """
        CREATE TRIGGER scheduled_jobs_notify_update
        AFTER UPDATE OF enabled, schedule_type, cron_expression, timezone, group_name
        ON scheduled_jobs
        FOR EACH ROW
        WHEN (
            OLD.enabled IS DISTINCT FROM NEW.enabled
            OR OLD.schedule_type IS DISTINCT FROM NEW.schedule_type
            OR OLD.cron_expression IS DISTINCT FROM NEW.cron_expression
            OR OLD.timezone IS DISTINCT FROM NEW.timezone
            OR OLD.group_name IS DISTINCT FROM NEW.group_name
        )
        EXECUTE FUNCTION zilean_notify_job_row()
        """
    )
    op.execute(
        """
        CREATE TRIGGER scheduled_jobs_notify_truncate
        AFTER TRUNCATE ON scheduled_jobs
        FOR EACH STATEMENT EXECUTE FUNCTION zilean_notify_jobs_all()
        """
    )
    op.execute(
        """
        CREATE TRIGGER disabled_groups_notify
        AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON disabled_groups
        FOR EACH STATEMENT EXECUTE FUNCTION zilean_notify_jobs_all()
        """
    )
