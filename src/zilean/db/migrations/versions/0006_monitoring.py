"""Monitoring: per-service process samples and script worker status reports.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker_metrics",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("service", sa.Text(), nullable=False),
        sa.Column(
            "sampled_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("hostname", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("cpu_percent", sa.Float(), nullable=False),
        sa.Column("rss_bytes", sa.BigInteger(), nullable=False),
        sa.Column("python_allocated_blocks", sa.BigInteger(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("asyncio_tasks", sa.Integer(), nullable=False),
        sa.Column("open_fds", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=("pk_worker_metrics")),
    )
    op.create_index(
        "ix_worker_metrics_service_sampled_at",
        "worker_metrics",
        ["service", "sampled_at"],
        unique=False,
    )
    op.create_index("ix_worker_metrics_sampled_at", "worker_metrics", ["sampled_at"], unique=False)
    op.create_table(
        "script_worker_status",
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("hostname", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("sandbox_enforced", sa.Boolean(), nullable=False),
        sa.Column("volumes_root_mounted", sa.Boolean(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("queue", name=("pk_script_worker_status")),
    )


def downgrade() -> None:
    op.drop_table("script_worker_status")
    op.drop_index("ix_worker_metrics_sampled_at", table_name="worker_metrics")
    op.drop_index("ix_worker_metrics_service_sampled_at", table_name="worker_metrics")
    op.drop_table("worker_metrics")
