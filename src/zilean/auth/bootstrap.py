"""First-boot seeding: the bootstrap Super Admin and the database-backed settings.

Both are seeded once. Later changes to ADMIN_USERNAME, ADMIN_PASSWORD_HASH or
DEFAULT_AUDIT_RETENTION_DAYS have no effect: the rows, not the environment, are the truth.
"""

from __future__ import annotations

import uuid

import structlog
from sqlalchemy import exists, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.auth.permissions import SystemRole
from zilean.auth.roles import system_role_id
from zilean.db.tables import app_settings, user_roles, users
from zilean.errors import ConfigError

log = structlog.get_logger(__name__)

AUDIT_RETENTION_SETTING = "audit_retention_days"


async def super_admin_exists(conn: AsyncConnection) -> bool:
    query = select(exists().where(users.c.is_super_admin | users.c.is_bootstrap))
    return bool((await conn.execute(query)).scalar_one())


async def seed_super_admin(
    conn: AsyncConnection, username: str | None, password_hash: str | None
) -> bool:
    """Create the bootstrap Super Admin unless a Super Admin exists; return whether it did."""
    if await super_admin_exists(conn):
        return False
    if not username or not password_hash:
        raise ConfigError(
            "ADMIN_USERNAME and ADMIN_PASSWORD_HASH are required on first boot, "
            "to create the Super Admin"
        )
    # The unique index on is_bootstrap makes a racing second core a no-op here.
    user_id = uuid.uuid4()
    created = await conn.execute(
        insert(users)
        .values(
            id=user_id,
            email=username,
            password_hash=password_hash,
            status="active",
            is_super_admin=True,
            is_bootstrap=True,
        )
        .on_conflict_do_nothing()
        # RETURNING, not rowcount: an INSERT built by SQLAlchemy reports a rowcount of -1.
        .returning(users.c.id)
    )
    if created.first() is None:
        return False
    await conn.execute(
        insert(user_roles).values(
            user_id=user_id, role_id=await system_role_id(conn, SystemRole.SUPER_ADMIN)
        )
    )
    log.info("bootstrap super admin created", action="auth.bootstrap_seeded", email=username)
    return True


async def seed_app_settings(conn: AsyncConnection, audit_retention_days: int) -> None:
    await conn.execute(
        insert(app_settings)
        .values(key=AUDIT_RETENTION_SETTING, value=audit_retention_days)
        .on_conflict_do_nothing()
    )
