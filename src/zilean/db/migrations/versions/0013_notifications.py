"""Notifications: targets, the workers' outbox, alert-policy state, alarms and thresholds.

Adds two alert-policy columns to `scheduled_jobs` (defaults keep every job's behaviour:
the first failed run notifies). SMTP and the Apprise server connection live in
`app_settings` under the keys `smtp` and `apprise`, so they need no table.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _timestamps(*names: str) -> list[sa.Column[object]]:
    return [
        sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)
        for name in names
    ]


def _job_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["job_id"], ["scheduled_jobs.id"], name=f"fk_{table}_job_id_scheduled_jobs",
        ondelete="CASCADE",
    )  # fmt: skip


def upgrade() -> None:
    op.add_column(
        "scheduled_jobs",
        sa.Column("notify_after_failures", sa.Integer(), server_default="1", nullable=False),
    )
    op.add_column(
        "scheduled_jobs",
        sa.Column("notify_reminder_minutes", sa.Integer(), server_default="0", nullable=False),
    )
    op.create_table(
        "notify_targets",
        sa.Column("id", sa.Integer(), sa.Identity(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("address", sa.Text(), server_default="", nullable=False),
        sa.Column("address_hint", sa.Text(), server_default="", nullable=False),
        sa.Column("sealed_url", sa.LargeBinary(), nullable=True),
        sa.Column("sealed_signing_secret", sa.LargeBinary(), nullable=True),
        sa.Column(
            "events", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
        *_timestamps("created_at", "updated_at"),
        sa.CheckConstraint(
            "kind IN ('apprise', 'email', 'webhook')", name="ck_notify_targets_kind"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_notify_targets"),
    )
    op.create_table(
        "notify_events",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("pool_index", sa.Integer(), server_default="0", nullable=False),
        sa.Column("firing", sa.Text(), server_default="", nullable=False),
        sa.Column("fired_members", sa.Integer(), server_default="1", nullable=False),
        sa.Column(
            "detail", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        *_timestamps("occurred_at"),
        _job_fk("notify_events"),
        sa.PrimaryKeyConstraint("id", name="pk_notify_events"),
    )
    op.create_index("ix_notify_events_job_id", "notify_events", ["job_id"])
    op.create_table(
        "job_notify_state",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "failure_notified", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
        sa.Column("last_notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("skipping", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        _job_fk("job_notify_state"),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_notify_state"),
    )
    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column(
            "detail", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        *_timestamps("occurred_at"),
        _job_fk("job_events"),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", sa.text("id DESC")])
    op.create_table(
        "job_alarms",
        sa.Column("id", sa.Integer(), sa.Identity(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("metric", sa.Text(), nullable=False),
        sa.Column("threshold", sa.Integer(), nullable=False),
        sa.Column("window_minutes", sa.Integer(), nullable=False),
        sa.Column("last_state", sa.Text(), server_default="ok", nullable=False),
        sa.Column("last_changed_at", sa.DateTime(timezone=True), nullable=True),
        *_timestamps("created_at"),
        sa.CheckConstraint("metric IN ('total', 'failed')", name="ck_job_alarms_metric"),
        sa.CheckConstraint("last_state IN ('ok', 'breached')", name="ck_job_alarms_last_state"),
        _job_fk("job_alarms"),
        sa.PrimaryKeyConstraint("id", name="pk_job_alarms"),
    )
    op.create_index("ix_job_alarms_job_id", "job_alarms", ["job_id"])
    op.create_table(
        "metric_thresholds",
        sa.Column("service", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("cpu_percent", sa.Float(), nullable=True),
        sa.Column("memory_mb", sa.Float(), nullable=True),
        sa.Column(
            "target_ids", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
        sa.Column("last_state", sa.Text(), server_default="ok", nullable=False),
        sa.Column("last_changed_at", sa.DateTime(timezone=True), nullable=True),
        *_timestamps("updated_at"),
        sa.CheckConstraint(
            "last_state IN ('ok', 'breached')", name="ck_metric_thresholds_last_state"
        ),
        sa.PrimaryKeyConstraint("service", name="pk_metric_thresholds"),
    )


def downgrade() -> None:
    for table in (
        "metric_thresholds", "job_alarms", "job_events", "job_notify_state", "notify_events",
        "notify_targets",
    ):  # fmt: skip
        op.drop_table(table)
    op.execute("DELETE FROM app_settings WHERE key IN ('smtp', 'apprise')")
    op.drop_column("scheduled_jobs", "notify_reminder_minutes")
    op.drop_column("scheduled_jobs", "notify_after_failures")
