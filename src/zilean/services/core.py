"""Core's start-up duties: migrations and first-boot seeding, before it serves anything."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.auth.bootstrap import seed_app_settings, seed_super_admin
from zilean.config import CoreSettings
from zilean.db.migrate import migrate
from zilean.registry.sample_job import seed_sample_job


async def prepare_core(
    settings: CoreSettings,
    engine: AsyncEngine,
    *,
    seed_admin: bool = True,
    sample_job_local_url: str | None = None,
) -> bool:
    """Migrate, then seed the Super Admin, the settings and (SEED_JOB) the sample job.

    Return whether an admin was created. `zilean up` passes `seed_admin=False` when it
    generated the password: it creates that admin itself once it is serving, so a start
    that fails earlier never leaves an account whose password nobody saw.
    `sample_job_local_url` is what the sample job calls when httpbin.org is unreachable.
    """
    await asyncio.to_thread(migrate, settings.database_url)
    created = False
    async with engine.begin() as conn:
        if seed_admin:
            created = await seed_super_admin(
                conn, settings.admin_username, settings.admin_password_hash
            )
        await seed_app_settings(conn, settings.default_audit_retention_days)
    if settings.seed_job:
        await seed_sample_job(engine, settings, local_url=sample_job_local_url)
    return created
