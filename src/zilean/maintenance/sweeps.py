"""Core's retention sweeps: once at start-up, then every 24 hours.

Every sweep is idempotent (a delete of rows past a cutoff), so each core replica runs
them, and two cores sweeping at once only repeat each other's work. A sweep that fails
is logged and tried again on the next pass; it never stops the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.audit.retention import sweep_once as sweep_audit
from zilean.loops import wait_for_stop
from zilean.maintenance.history import sweep_history
from zilean.maintenance.metrics import sweep_samples
from zilean.maintenance.queue_jobs import sweep_finished_queue_jobs

log = structlog.get_logger(__name__)

SWEEP_INTERVAL = 24 * 3600.0  # seconds


async def _sweep_history(engine: AsyncEngine) -> None:
    swept = await sweep_history(engine)
    log.info(
        "history sweep",
        action="history.sweep",
        attempts_removed=swept.attempts,
        call_stats_removed=swept.call_stats,
        firings_removed=swept.firings,
    )


async def _sweep_queue_jobs(engine: AsyncEngine) -> None:
    removed = await sweep_finished_queue_jobs(engine)
    log.info("queue job sweep", action="queue_jobs.sweep", queue_rows_removed=removed)


async def _sweep_samples(engine: AsyncEngine) -> None:
    removed = await sweep_samples(engine)
    log.info("metrics sample sweep", action="metrics.sweep", samples_removed=removed)


async def _sweep_audit(engine: AsyncEngine) -> None:
    await sweep_audit(engine)  # logs its own summary


SWEEPS: tuple[tuple[str, Callable[[AsyncEngine], Awaitable[None]]], ...] = (
    ("audit", _sweep_audit),
    ("history", _sweep_history),
    ("queue_jobs", _sweep_queue_jobs),
    ("metrics", _sweep_samples),
)


async def sweep_all(engine: AsyncEngine) -> None:
    """Run every sweep once; a failing sweep is logged and the others still run."""
    for name, sweep in SWEEPS:
        try:
            await sweep(engine)
        except Exception:
            log.exception("retention sweep failed", action="sweep.failed", sweep=name)


async def run_sweeps(engine: AsyncEngine, stop: asyncio.Event) -> None:
    """Sweep at start-up and then daily until `stop` is set."""
    while not stop.is_set():
        await sweep_all(engine)
        await wait_for_stop(stop, SWEEP_INTERVAL)
