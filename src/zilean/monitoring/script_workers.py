"""Script worker status: each worker reports its host checks every minute, per queue."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import structlog
from psycopg.rows import dict_row

from zilean.config import ScriptWorkerSettings
from zilean.db.direct import short_connection
from zilean.execution.queues import RUNTIME_QUEUES
from zilean.jobkinds.script.host import sandbox_enforced, volumes_root_mounted
from zilean.loops import every

log = structlog.get_logger(__name__)

REPORT_INTERVAL = 60.0  # seconds
STALE_AFTER = timedelta(minutes=3)


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


_REPORT = """
INSERT INTO script_worker_status
       (queue, hostname, pid, sandbox_enforced, volumes_root_mounted, updated_at)
VALUES (%(queue)s, %(hostname)s, %(pid)s, %(sandbox_enforced)s, %(volumes_root_mounted)s, now())
ON CONFLICT (queue) DO UPDATE
   SET hostname = excluded.hostname, pid = excluded.pid,
       sandbox_enforced = excluded.sandbox_enforced,
       volumes_root_mounted = excluded.volumes_root_mounted, updated_at = now()
"""


async def report_status(database_url: str, queue: str, checks: HostChecks) -> None:
    """Write (or refresh) this queue's status row, on a connection of its own."""
    values = {
        "queue": queue,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "sandbox_enforced": checks.sandbox_enforced,
        "volumes_root_mounted": checks.volumes_root_mounted,
    }
    async with short_connection(database_url, application_name="zilean-script-worker") as conn:
        await conn.execute(_REPORT, values)


async def host_checks(settings: ScriptWorkerSettings) -> HostChecks:
    """Check the host once, at start-up: the worker runs, and reports, by this result."""
    try:
        checks = await check_host(settings)
    except Exception:
        # A check that cannot run is a check that failed; the worker still reports.
        log.exception("script worker host checks failed", action="script_worker.checks_failed")
        checks = HostChecks(sandbox_enforced=False, volumes_root_mounted=False)
    log.info(
        "script worker host checks",
        action="script_worker.host_checks",
        queue=str(RUNTIME_QUEUES[settings.runtime]),
        sandbox_enforced=checks.sandbox_enforced,
        volumes_root_mounted=checks.volumes_root_mounted,
    )
    return checks


async def run_status_reports(
    database_url: str,
    settings: ScriptWorkerSettings,
    checks: HostChecks,
    stop: asyncio.Event,
    *,
    interval: float = REPORT_INTERVAL,
) -> None:
    """Report the host checks now and every `interval` seconds."""
    queue = str(RUNTIME_QUEUES[settings.runtime])

    async def step() -> None:
        await report_status(database_url, queue, checks)

    await every(
        interval,
        stop,
        step,
        failure="could not report script worker status",
        action="script_worker.report_failed",
    )


async def worker_statuses(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
    """One entry per script queue that has reported; stale after 3 minutes of silence."""
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(
        "SELECT queue, sandbox_enforced, volumes_root_mounted, updated_at,"
        " now() - updated_at > %(stale_after)s AS stale"
        " FROM script_worker_status ORDER BY queue",
        {"stale_after": STALE_AFTER},
    )
    return await cursor.fetchall()
