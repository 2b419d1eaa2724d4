"""The sample job `SEED_JOB=1` inserts: a GET every five minutes, to try the whole path.

It is inserted once per database, ever: a marker row in `app_settings` records that it
was, so restarting with SEED_JOB still set, or deleting the job, never brings it back.
The job goes through the registry service like any API write, so it is validated and
audited (by the console actor).

Its target is httpbin.org when this machine can reach it. When it cannot (a closed
network) and the caller knows a local address that answers, the job calls that instead,
under a name that says so: `zilean up` passes its own `/healthz`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.audit.log import CONSOLE
from zilean.auth.principal import Credential, Principal
from zilean.config import CoreSettings
from zilean.db.tables import app_settings
from zilean.registry.fields import JobWrite
from zilean.registry.jobs import create_job
from zilean.registry.validation import RegistryContext

log = structlog.get_logger(__name__)

PUBLIC_NAME = "smoke-test-httpbin"
PUBLIC_URL = "https://httpbin.org/get"
PUBLIC_HOST = ("httpbin.org", 443)
LOCAL_NAME = "smoke-test-local"
CRON = "*/5 * * * *"
SEEDED_SETTING = "sample_job_seeded"
PROBE_TIMEOUT = 3.0  # seconds for DNS and a TCP connection to the public target

# Registry checks run against a Super Admin: seeding may run before any user exists.
_SEEDER = Principal(
    user_id=uuid.UUID(int=0),
    email="",
    is_super_admin=True,
    is_bootstrap=False,
    must_change_password=False,
    granted=frozenset(),
    credential=Credential.CONSOLE,
)


async def reachable(host: str, port: int) -> bool:
    """Return whether a TCP connection to `host:port` opens within PROBE_TIMEOUT."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def sample_target(
    local_url: str | None, public_host: tuple[str, int] = PUBLIC_HOST
) -> tuple[str, str]:
    """Return the sample job's (name, url): the public target, or `local_url` offline."""
    if local_url is None or await reachable(*public_host):
        return PUBLIC_NAME, PUBLIC_URL
    return LOCAL_NAME, local_url


async def seed_sample_job(
    engine: AsyncEngine,
    settings: CoreSettings,
    *,
    local_url: str | None = None,
    public_host: tuple[str, int] = PUBLIC_HOST,
) -> dict[str, Any] | None:
    """Insert the sample job unless one was ever inserted; return it, or None."""
    marker = select(app_settings.c.key).where(app_settings.c.key == SEEDED_SETTING)
    async with engine.connect() as conn:
        if (await conn.execute(marker)).first() is not None:
            log.info(
                "SEED_JOB is set but the sample job was inserted before; nothing to do",
                action="registry.sample_job_skipped",
            )
            return None
    # Probe outside the transaction: a slow network must not hold a connection open.
    name, url = await sample_target(local_url, public_host)
    context = RegistryContext.of(settings)
    async with engine.begin() as conn:
        # RETURNING, not rowcount: an INSERT built by SQLAlchemy reports a rowcount of -1.
        claimed = await conn.execute(
            insert(app_settings)
            .values(key=SEEDED_SETTING, value=True)
            .on_conflict_do_nothing(index_elements=[app_settings.c.key])
            .returning(app_settings.c.key)
        )
        if claimed.first() is None:
            return None  # another core seeded it between our check and now
        job = await create_job(
            conn,
            _SEEDER,
            CONSOLE,
            context,
            JobWrite.model_validate(
                {"name": name, "schedule_type": "cron", "cron_expression": CRON, "url": url}
            ),
        )
    log.info(
        "sample job inserted", action="registry.sample_job_seeded", job_id=str(job["id"]), url=url
    )
    if name == LOCAL_NAME:
        log.warning(
            f"{PUBLIC_URL} is not reachable from this machine; the sample job calls {url} instead",
            action="registry.sample_job_offline",
        )
    return job
