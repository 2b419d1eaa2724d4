"""The worker's side of notifications: one outbox row per event, written after recording.

Written in the background on the attempt's own connection pool, so it never delays the
recording or the next attempt; core delivers the rows (`dispatcher.py`). Best effort like
the failure callback: a worker that dies between recording and this insert loses that
one event (the attempt itself is recorded either way).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
import structlog
from psycopg.types.json import Jsonb

from zilean.execution.hot_path import HotConnections
from zilean.execution.payload import AttemptArgs
from zilean.notify.kinds import EventKind

log = structlog.get_logger(__name__)

SNIPPET_CHARS = 300  # of the (already redacted) error, in a notification

# A capped loop is also kept on the job (`job_events`), so its history shows it.
_INSERT = """
WITH event AS (
    INSERT INTO notify_events (job_id, kind, pool_index, firing, fired_members, detail)
    VALUES (%(job_id)s, %(kind)s, %(pool_index)s, %(firing)s, %(fired_members)s, %(detail)s)
    RETURNING job_id, kind, detail
),
kept AS (
    INSERT INTO job_events (job_id, kind, detail)
    SELECT job_id, kind, detail FROM event WHERE kind = 'loop_capped'
)
SELECT 1 AS stored FROM event
"""


@dataclass(frozen=True)
class Event:
    kind: EventKind
    args: AttemptArgs
    detail: dict[str, Any] = field(default_factory=dict)


def snippet(error: str | None) -> str:
    text = (error or "").strip()
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


def run_end(args: AttemptArgs, state: str, error: str | None, status_code: int | None) -> Event:
    """The event a run's last attempt leaves: success, failure, or retries exhausted.

    A run that spent a budget of more than one attempt exhausted its retries; a run with
    one attempt, or one cancelled as unretryable, failed.
    """
    if state == "succeeded":
        return Event(EventKind.SUCCESS, args, {"attempts": args.attempt})
    exhausted = state == "failed" and args.max_attempts > 1
    kind = EventKind.RETRY_EXHAUSTED if exhausted else EventKind.FAILURE
    detail = {"attempts": args.attempt, "snippet": snippet(error), "status_code": status_code}
    return Event(kind, args, detail)


class Outbox:
    """Adds events to `notify_events` without making the attempt wait."""

    def __init__(self, connections: HotConnections) -> None:
        self._connections = connections
        self._in_flight: set[asyncio.Task[None]] = set()

    def add(self, event: Event) -> None:
        task = asyncio.create_task(self._insert(event))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def settle(self) -> None:
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _insert(self, event: Event) -> None:
        args = event.args
        params = {
            "job_id": uuid.UUID(args.job_id),
            "kind": str(event.kind),
            "pool_index": args.pool_index,
            "firing": args.fired_at or "",
            "fired_members": max(1, args.fired_members),
            "detail": Jsonb(event.detail),
        }
        try:
            await self._connections.fetch_all(_INSERT, params)
        except psycopg.Error as exc:  # a background task: nothing above it would see it
            log.warning(
                "notification event could not be stored",
                action="notify.outbox_failed",
                job_id=args.job_id,
                kind=str(event.kind),
                error=type(exc).__name__,
            )
