"""MCP tokens: each one a bearer credential for `/mcp`, backed by a hidden service account.

The account carries the token's role, so the audit log names that exact token for every
call it makes. `users.is_service_account` hides such accounts from user management: they
have no password, cannot sign in and go away with their token.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "users",
        sa.Column(
            "is_service_account", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
    )
    op.create_table(
        "mcp_tokens",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.LargeBinary(), nullable=False),
        sa.Column("token_hint", sa.Text(), nullable=False),
        sa.Column("created_by", sa.Uuid(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_mcp_tokens_user_id_users", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_mcp_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_mcp_tokens_token_hash"),
        sa.UniqueConstraint("user_id", name="uq_mcp_tokens_user_id"),
    )


def downgrade() -> None:
    # The accounts go with their tokens: without the flag they would surface as users.
    op.execute("DELETE FROM users WHERE is_service_account")
    op.drop_table("mcp_tokens")
    op.drop_column("users", "is_service_account")
