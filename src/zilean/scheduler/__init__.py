"""The scheduler: fires cron and rate jobs from an in-memory map kept in line with the registry.

`reconciler.py` holds the map and its two steps (reconcile, fire due entries),
`entries.py` the entries and their due-time queue, `leader.py` the advisory-lock
leadership and change feed, and `loop.py` the loop core runs. See docs/scheduling.md.
"""

from __future__ import annotations

from zilean.scheduler.loop import RECONCILE_INTERVAL, SchedulerService
from zilean.scheduler.reconciler import Scheduler

__all__ = ["RECONCILE_INTERVAL", "Scheduler", "SchedulerService"]
