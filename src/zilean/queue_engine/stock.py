"""PgQueuer's own worker classes, set up for our schema: what the raw-engine baseline runs.

Zilean's consumer (`consumer.py`) does not use PgQueuer's `QueueManager`; the benchmark
suite does (`benchmarks/raw_engine.py`), to show what the engine costs by itself.
"""

from __future__ import annotations

from pgqueuer.adapters.persistence.qb import DBSettings
from pgqueuer.domain.types import Channel

from zilean.queue_engine.statements import LOG_TABLE, QUEUE_TABLE, STATISTICS_TABLE


def engine_settings(channel: str) -> DBSettings:
    """PgQueuer's object names, all given: nothing is read from `PGQUEUER_*` variables."""
    return DBSettings(
        prefix="",
        channel=Channel(channel),
        function="fn_pgqueuer_changed",
        statistics_table=STATISTICS_TABLE,
        queue_status_type="pgqueuer_status",
        queue_table=QUEUE_TABLE,
        queue_table_log=LOG_TABLE,
        trigger="tg_pgqueuer_changed",
        schedules_table="pgqueuer_schedules",
    )


def batch_and_capacity(concurrency: int) -> tuple[int, int]:
    """PgQueuer's batch size and claim cap for `concurrency` jobs at a time.

    It refuses a cap below twice the batch, so a concurrency of 1 claims up to two jobs.
    """
    batch = max(1, concurrency // 2)
    return batch, max(concurrency, 2 * batch)
