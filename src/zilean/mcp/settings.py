"""The MCP switch (`app_settings` key `mcp`), and core's probe of the mcp service.

The endpoint is off until an admin turns it on. The mcp service reads the switch on
every request, so turning it off takes effect at once, with no restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import app_settings

MCP_SETTING = "mcp"
PROBE_TIMEOUT = 2.0  # seconds


async def mcp_enabled(conn: AsyncConnection) -> bool:
    value = (
        await conn.execute(select(app_settings.c.value).where(app_settings.c.key == MCP_SETTING))
    ).scalar_one_or_none()
    return isinstance(value, dict) and value.get("enabled") is True


async def set_mcp_enabled(conn: AsyncConnection, enabled: bool) -> None:
    statement = insert(app_settings).values(key=MCP_SETTING, value={"enabled": enabled})
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[app_settings.c.key],
            set_={"value": statement.excluded.value, "updated_at": func.now()},
        )
    )


@dataclass(frozen=True)
class Probe:
    live: bool
    checked_at: datetime


async def probe(health_url: str) -> Probe:
    """Whether the mcp service answers its own `/healthz` with a 200 within 2 seconds.

    Informational: the mcp service is a process of its own, deployed or not, and the
    switch works either way. Any failure (refused, unresolvable, slow) reads not live.
    """
    checked_at = datetime.now(UTC)
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(health_url, allow_redirects=False) as response,
        ):
            live = response.status == 200
    except (aiohttp.ClientError, TimeoutError, ValueError):
        live = False
    return Probe(live=live, checked_at=checked_at)
