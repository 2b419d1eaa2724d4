"""Attempt recording and the duplicate-firing guard: job_attempts, job_call_stats, job_firings.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_attempts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("queue_job_id", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("trigger", sa.Text(), nullable=False),
        sa.Column("pool_index", sa.Integer(), nullable=False),
        sa.Column("loop_iteration", sa.Integer(), nullable=False),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finalized_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("last_call", postgresql.JSONB(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["scheduled_jobs.id"],
            name=("fk_job_attempts_job_id_scheduled_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=("pk_job_attempts")),
    )
    op.create_index("ix_job_attempts_attempted_at", "job_attempts", ["attempted_at"], unique=False)
    op.create_index(
        "ix_job_attempts_job_id_id",
        "job_attempts",
        ["job_id", sa.literal_column("id DESC")],
        unique=False,
    )
    op.create_table(
        "job_call_stats",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("bucket_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("completed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("duration_sum_ms", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("duration_max_ms", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["scheduled_jobs.id"],
            name=("fk_job_call_stats_job_id_scheduled_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "bucket_start", name=("pk_job_call_stats")),
    )
    op.create_index(
        "ix_job_call_stats_bucket_start", "job_call_stats", ["bucket_start"], unique=False
    )
    op.create_table(
        "job_firings",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["scheduled_jobs.id"],
            name=("fk_job_firings_job_id_scheduled_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "scheduled_for", name=("pk_job_firings")),
    )
