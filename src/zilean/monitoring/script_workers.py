"""Script worker status: each worker reports its host checks every minute, per queue."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.config import ScriptWorkerSettings
from zilean.db.tables import script_worker_status
from zilean.execution.queues import RUNTIME_QUEUES
from zilean.jobkinds.script.host import sandbox_enforced, volumes_root_mounted
from zilean.loops import every

log = structlog.get_logger(__name__)

REPORT_INTERVAL = 60.0  # seconds
STALE_AFTER = timedelta(minutes=3)

status = script_worker_status.c


@dataclass(frozen=True)
class HostChecks:
    sandbox_enforced: bool
    volumes_root_mounted: bool


async def check_host(settings: ScriptWorkerSettings) -> HostChecks:
    """Run both start-up checks off the event loop (the bwrap self-test is a subprocess)."""
    return HostChecks(
        sandbox_enforced=await asyncio.to_thread(sandbox_enforced, settings.sandbox_enabled),
        volumes_root_mounted=await asyncio.to_thread(volumes_root_mounted, settings.volumes_root),
    )


async def report_status(engine: AsyncEngine, queue: str, checks: HostChecks) -> None:
    values = {
        "queue": queue,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "sandbox_enforced": checks.sandbox_enforced,
        "volumes_root_mounted": checks.volumes_root_mounted,
    }
    statement = insert(script_worker_status).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=[status.queue],
        set_={
            **{k: statement.excluded[k] for k in values if k != "queue"},
            "updated_at": func.now(),
        },
    )
    async with engine.begin() as conn:
        await conn.execute(statement)


async def run_status_reports(
    engine: AsyncEngine,
    settings: ScriptWorkerSettings,
    stop: asyncio.Event,
    *,
    interval: float = REPORT_INTERVAL,
) -> None:
    """Check the host once, then report the result now and every `interval` seconds."""
    queue = str(RUNTIME_QUEUES[settings.runtime])
    try:
        checks = await check_host(settings)
    except Exception:
        # A check that cannot run is a check that failed; the worker still reports.
        log.exception("script worker host checks failed", action="script_worker.checks_failed")
        checks = HostChecks(sandbox_enforced=False, volumes_root_mounted=False)
    log.info(
        "script worker host checks",
        action="script_worker.host_checks",
        queue=queue,
        sandbox_enforced=checks.sandbox_enforced,
        volumes_root_mounted=checks.volumes_root_mounted,
    )

    async def step() -> None:
        await report_status(engine, queue, checks)

    await every(
        interval,
        stop,
        step,
        failure="could not report script worker status",
        action="script_worker.report_failed",
    )


async def worker_statuses(conn: AsyncConnection) -> list[dict[str, Any]]:
    """One entry per script queue that has reported; stale after 3 minutes of silence."""
    rows = await conn.execute(
        select(
            status.queue,
            status.sandbox_enforced,
            status.volumes_root_mounted,
            status.updated_at,
            (func.now() - status.updated_at > STALE_AFTER).label("stale"),
        ).order_by(status.queue)
    )
    return [dict(row._mapping) for row in rows]
