"""Process samples: one measurement per process, and the process's private memory.

A process that hosts several services (`zilean up` runs core, ui, mcp and webhook in
one) now takes one sample and stores it under each hosted label, all in one statement;
`process_services` lists the labels that share those figures, so nobody adds up one
process's CPU four times. Samples stored before this revision were each their own
label's, so they get that label alone.

`anon_rss_bytes` is the process's resident anonymous memory (its heap, allocator arenas
and stacks; no code or shared libraries). Older samples never measured it: NULL.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("worker_metrics", sa.Column("anon_rss_bytes", sa.BigInteger(), nullable=True))
    op.add_column(
        "worker_metrics", sa.Column("process_services", postgresql.ARRAY(sa.Text()), nullable=True)
    )
    op.execute("UPDATE worker_metrics SET process_services = ARRAY[service]")
    op.alter_column("worker_metrics", "process_services", nullable=False)


def downgrade() -> None:
    op.drop_column("worker_metrics", "process_services")
    op.drop_column("worker_metrics", "anon_rss_bytes")
