"""Core's start-up duties: migrations and first-boot seeding, before it serves anything."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.auth.bootstrap import seed_app_settings, seed_super_admin
from zilean.config import CoreSettings
from zilean.db.migrate import migrate


async def prepare_core(settings: CoreSettings, engine: AsyncEngine) -> bool:
    """Migrate, then seed the Super Admin and settings; return whether an admin was created."""
    await asyncio.to_thread(migrate, settings.database_url)
    async with engine.begin() as conn:
        created = await seed_super_admin(
            conn, settings.admin_username, settings.admin_password_hash
        )
        await seed_app_settings(conn, settings.default_audit_retention_days)
    return created
