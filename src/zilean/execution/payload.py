"""A queue job's payload: which attempt of which run, and why the run started.

Kept apart from the producers (`enqueue.py`) because every worker reads payloads on
every attempt and must not load what producers need (SQLAlchemy).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

# A queue job that continues a run (a retry, a later loop iteration) goes before fresh
# firings that are due at the same time: its run already holds the overlap lock, and a
# backlog of new runs must not delay a retry or loop past its due time.
FIRING_PRIORITY = 0
CONTINUATION_PRIORITY = 1


class Trigger(StrEnum):
    """Why a run started; carried forward through its loop iterations and retries."""

    SCHEDULE = "schedule"  # a cron or rate firing
    ONE_OFF = "one_off"  # a one-off reaching run_at
    RUN_NOW = "run_now"  # POST /api/jobs/{id}/run
    WEBHOOK = "webhook"  # POST /api/webhooks/{id}/{token}


@dataclass(frozen=True)
class AttemptArgs:
    """The queue job's payload: which job and member, never the job's settings.

    The worker re-reads the row on every attempt, so edits reach the next attempt. Only
    what must survive edits is copied here: the attempt budget fixed at insert, and the
    trigger with a webhook run's payload, metadata and hop count. A retry is a fresh
    queue job carrying `attempt + 1`; the queue engine never retries an attempt itself.
    """

    job_id: str
    loop_iteration: int
    pool_index: int
    max_attempts: int
    attempt: int = 1  # 1-based; our own retries re-insert with the next number
    trigger: str = Trigger.SCHEDULE
    webhook_hops: int | None = None
    webhook_payload: Any = None
    webhook_metadata: dict[str, Any] | None = None
    # Which firing the run belongs to, and how many members it started: notifications
    # gather a pool's members that ended in one firing into one digest.
    fired_at: str | None = None
    fired_members: int = 1

    @property
    def priority(self) -> int:
        continues = self.attempt > 1 or self.loop_iteration > 0
        return CONTINUATION_PRIORITY if continues else FIRING_PRIORITY

    def to_payload(self) -> bytes:
        # Not `asdict`, which deep-copies every value first (22 µs against 6 µs), for a
        # copy `json.dumps` never needed; every loop iteration and retry queues one.
        return json.dumps({name: getattr(self, name) for name in _FIELDS}).encode()

    @classmethod
    def from_payload(cls, payload: bytes) -> AttemptArgs:
        """Read a queue job's payload; unknown keys (from a newer version) are ignored."""
        args: dict[str, Any] = json.loads(payload)
        known = {name: args[name] for name in cls.__dataclass_fields__ if name in args}
        return cls(**known)


_FIELDS = tuple(field.name for field in fields(AttemptArgs))
