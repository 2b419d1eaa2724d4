"""Job registry: scheduled jobs, disabled groups, global variables, script volumes.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "disabled_groups",
        sa.Column("group_name", sa.Text(), nullable=False),
        sa.Column(
            "disabled_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("group_name", name=("pk_disabled_groups")),
    )
    op.create_table(
        "global_variables",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), server_default="", nullable=False),
        sa.Column("secret_value", sa.LargeBinary(), nullable=True),
        sa.Column("script_secret_value", sa.LargeBinary(), nullable=True),
        sa.Column("is_secret", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "allow_in_scripts", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=("pk_global_variables")),
        sa.UniqueConstraint("name", name=("uq_global_variables_name")),
    )
    op.create_table(
        "scheduled_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("group_name", sa.Text(), server_default="", nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("schedule_type", sa.Text(), server_default="cron", nullable=False),
        sa.Column("cron_expression", sa.Text(), server_default="", nullable=False),
        sa.Column("timezone", sa.Text(), server_default="", nullable=False),
        sa.Column("run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("run_at_fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("one_off_after_run", sa.Text(), server_default="keep", nullable=False),
        sa.Column("webhook_token_hash", sa.LargeBinary(), nullable=True),
        sa.Column("webhook_token_hint", sa.Text(), nullable=True),
        sa.Column("webhook_token_rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("job_type", sa.Text(), server_default="http", nullable=False),
        sa.Column("http_method", sa.Text(), server_default="GET", nullable=False),
        sa.Column("url", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "query_params",
            postgresql.JSONB(),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column(
            "headers", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("auth_type", sa.Text(), server_default="none", nullable=False),
        sa.Column(
            "auth_config", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("auth_secret", sa.LargeBinary(), nullable=True),
        sa.Column("script_body", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "script_args", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
        sa.Column(
            "script_secret_vars",
            postgresql.JSONB(),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "capabilities",
            postgresql.JSONB(),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("exec_timeout_ms", sa.Integer(), server_default="60000", nullable=False),
        sa.Column("pool_count", sa.Integer(), server_default="1", nullable=False),
        sa.Column("overlap_policy", sa.Text(), server_default="skip", nullable=False),
        sa.Column("loop_enabled", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "loop_response_path", sa.Text(), server_default="result.remaining", nullable=False
        ),
        sa.Column("loop_delay_ms", sa.Integer(), server_default="1000", nullable=False),
        sa.Column("loop_jitter_ms", sa.Integer(), server_default="0", nullable=False),
        sa.Column("loop_max_iterations", sa.Integer(), server_default="50", nullable=False),
        sa.Column("retry_enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("retry_mode", sa.Text(), server_default="exponential", nullable=False),
        sa.Column("retry_base_delay_ms", sa.Integer(), server_default="1000", nullable=False),
        sa.Column("retry_multiplier", sa.Float(), server_default="2", nullable=False),
        sa.Column("retry_max_delay_ms", sa.Integer(), server_default="30000", nullable=False),
        sa.Column("retry_max_attempts", sa.Integer(), server_default="5", nullable=False),
        sa.Column("on_failure_url", sa.Text(), server_default="", nullable=False),
        sa.Column("notify_on", sa.Text(), server_default="none", nullable=False),
        sa.Column(
            "notify_all_targets", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
        sa.Column(
            "notify_targets",
            postgresql.JSONB(),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "running_since_by_pool",
            postgresql.JSONB(),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("invocations_total", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("invocations_completed", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("invocations_failed", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=("pk_scheduled_jobs")),
        sa.UniqueConstraint("webhook_token_hash", name=("uq_scheduled_jobs_webhook_token_hash")),
    )
    op.create_index(
        "ix_scheduled_jobs_group_name_name", "scheduled_jobs", ["group_name", "name"], unique=False
    )
    op.create_table(
        "script_volumes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("max_mode", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("max_mode IN ('ro', 'rw')", name=("ck_script_volumes_max_mode")),
        sa.PrimaryKeyConstraint("name", name=("pk_script_volumes")),
    )
