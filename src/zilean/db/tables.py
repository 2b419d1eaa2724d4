"""The typed definitions of Zilean's own tables (Procrastinate owns its `procrastinate_*`).

Alembic revisions create these tables; `tests/integration/test_schema.py` checks that the
migrated database matches this metadata exactly.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Index,
    MetaData,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

users = Table(
    "users",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("email", Text, nullable=False),
    # NULL until an invited user accepts and sets a password.
    Column("password_hash", Text, nullable=True),
    Column("status", Text, nullable=False, server_default="active"),
    Column("must_change_password", Boolean, nullable=False, server_default=text("false")),
    # Short-circuits every permission check.
    Column("is_super_admin", Boolean, nullable=False, server_default=text("false")),
    # The account seeded from ADMIN_USERNAME: protected from lock-out operations.
    Column("is_bootstrap", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_login_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("status IN ('invited', 'active', 'disabled')", name="status"),
)
Index("uq_users_email_lower", func.lower(users.c.email), unique=True)
# At most one bootstrap account, even when two cores race on first boot.
Index(
    "uq_users_bootstrap",
    users.c.is_bootstrap,
    unique=True,
    postgresql_where=users.c.is_bootstrap,
)

app_settings = Table(
    "app_settings",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", JSONB, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
