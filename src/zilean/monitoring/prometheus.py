"""Core's `/prometheus/metrics`: every process's latest sample, attempts and queue depth.

Workers run no HTTP server, so core re-exports what they stored. A one-minute ticker
reads the database into an in-memory snapshot; a scrape only formats that snapshot and
never queries. A service that has never sampled is left out rather than shown as zero.
Process gauges have one series per process: its `service` label lists the services it
hosts (`core,ui,mcp,webhook` under `zilean up`), so summing CPU counts each process once.
Labels are bounded: service, job type, outcome, queue and state, never a job id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.config import Service
from zilean.db.engine import driver_connection
from zilean.db.tables import job_events, scheduled_jobs
from zilean.execution.queues import Queue
from zilean.jobkinds.definitions import JOB_KINDS, UNROUTED_QUEUE
from zilean.loops import every
from zilean.monitoring.samples import SERVICES, latest_sample
from zilean.queue_engine.statements import QueueJobState, queue_depth

REFRESH_INTERVAL = 60.0  # seconds
# Waiting and running: the depth an operator alerts on.
QUEUE_STATES = tuple(str(state) for state in QueueJobState if state.unfinished)
OUTCOMES = ("completed", "failed")

# (metric name, sample field, help text). The spec's four names come first; Go's
# figures have no exact Python twin, so each carries the nearest honest one (the help
# text and docs/monitoring.md say which), and our own names follow.
PROCESS_GAUGES = (
    ("zilean_process_cpu_percent", "cpu_percent",
     "CPU used by the process, in percent of one core, averaged over the last minute."),
    ("zilean_process_mem_alloc_bytes", "anon_rss_bytes",
     "Resident anonymous memory of the process (heap, allocator arenas, stacks; no code "
     "or shared libraries): the nearest Python figure to Go's heap allocation."),
    ("zilean_process_mem_sys_bytes", "rss_bytes",
     "Resident set size of the process: the memory it holds from the OS, code and shared "
     "libraries included. Same value as zilean_process_resident_memory_bytes."),
    ("zilean_process_goroutines", "asyncio_tasks",
     "Tasks alive on the process's event loop, Python's unit of concurrent work. Same "
     "value as zilean_process_asyncio_tasks."),
    ("zilean_process_resident_memory_bytes", "rss_bytes",
     "Resident set size of the process."),
    ("zilean_process_python_allocated_blocks", "python_allocated_blocks",
     "Memory blocks the Python interpreter currently has allocated."),
    ("zilean_process_threads", "threads", "Operating-system threads of the process."),
    ("zilean_process_asyncio_tasks", "asyncio_tasks",
     "Tasks alive on the service's event loop."),
    ("zilean_process_open_fds", "open_fds", "Open file descriptors of the process."),
)  # fmt: skip


@dataclass
class AttemptTally:
    """Attempts by job type and outcome, built from the jobs' lifetime counters.

    Each refresh adds every job's growth since the previous one, so deleting a job never
    makes the published counter go backwards.
    """

    totals: dict[tuple[str, str], int] = field(default_factory=dict)
    _seen: dict[uuid.UUID, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for job_type in map(str, JOB_KINDS):
            for outcome in OUTCOMES:
                self.totals.setdefault((job_type, outcome), 0)

    def update(self, rows: Iterable[Any]) -> None:
        seen: dict[uuid.UUID, tuple[int, int]] = {}
        for row in rows:
            counts = (row.invocations_completed, row.invocations_failed)
            before = self._seen.get(row.id, (0, 0))
            for outcome, now, then in zip(OUTCOMES, counts, before, strict=True):
                grown = now - then if now >= then else now  # a lower count: a fresh start
                key = (row.job_type, outcome)
                self.totals[key] = self.totals.get(key, 0) + grown
            seen[row.id] = counts
        self._seen = seen


@dataclass
class EventTally:
    """Job events (capped loops, skipped firings) by kind, counted by id as they appear,
    so the sweep or a job's deletion never makes the counter go backwards."""

    totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("loop_capped", "firing_skipped"), 0)
    )
    last_id: int = 0

    async def update(self, conn: AsyncConnection) -> None:
        rows = await conn.execute(
            select(job_events.c.kind, func.count(), func.max(job_events.c.id))
            .where(job_events.c.id > self.last_id)
            .group_by(job_events.c.kind)
        )
        for kind, count, newest in rows:
            self.totals[kind] = self.totals.get(kind, 0) + int(count)
            self.last_id = max(self.last_id, int(newest))


def processes(samples: Mapping[Service, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Fold each service's newest sample into one entry per process measurement.

    A process stores one measurement under each label it hosts, in one statement, so
    the rows share hostname, pid and `sampled_at`. An entry's label lists (in health
    order) the services whose newest sample it is: a service whose host has since been
    replaced by another process is not claimed by the new one.
    """
    grouped: dict[tuple[str, int, datetime], list[Service]] = {}
    for service in SERVICES:
        sample = samples.get(service)
        if sample is not None:
            key = (sample["hostname"], sample["pid"], sample["sampled_at"])
            grouped.setdefault(key, []).append(service)
    return [(",".join(members), samples[members[0]]) for members in grouped.values()]


@dataclass(frozen=True)
class Snapshot:
    processes: list[tuple[str, dict[str, Any]]]  # (hosted services, their newest sample)
    attempts: dict[tuple[str, str], int]
    queue_depth: dict[tuple[str, str], int]
    events: dict[str, int] = field(default_factory=dict)


class MetricsExporter(Collector):
    """Holds the latest snapshot and renders it in the Prometheus text format."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._tally = AttemptTally()
        self._events = EventTally()
        self._snapshot = Snapshot(processes=[], attempts=dict(self._tally.totals), queue_depth={})
        self.refreshed = asyncio.Event()

    async def refresh(self) -> None:
        async with self.engine.connect() as conn:
            samples = {}
            for service in SERVICES:
                sample = await latest_sample(conn, service)
                if sample is not None:
                    samples[service] = sample
            jobs = await conn.execute(
                select(
                    scheduled_jobs.c.id,
                    scheduled_jobs.c.job_type,
                    scheduled_jobs.c.invocations_completed,
                    scheduled_jobs.c.invocations_failed,
                )
            )
            self._tally.update(jobs)
            depth = await _queue_depth(conn)
            await self._events.update(conn)
        self._snapshot = Snapshot(
            processes(samples), dict(self._tally.totals), depth, dict(self._events.totals)
        )
        self.refreshed.set()

    async def run(self, stop: asyncio.Event, *, interval: float = REFRESH_INTERVAL) -> None:
        """Refresh now and every `interval` seconds; a failed refresh keeps the old snapshot."""
        await every(
            interval,
            stop,
            self.refresh,
            failure="could not refresh the Prometheus snapshot",
            action="prometheus.refresh_failed",
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot
        for name, key, help_text in PROCESS_GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=["service"])
            for hosted, sample in snapshot.processes:
                if sample[key] is not None:  # a figure older samples never measured
                    gauge.add_metric([hosted], float(sample[key]))
            yield gauge
        sampled = GaugeMetricFamily(
            "zilean_process_last_sample_timestamp_seconds",
            "When the process last stored a sample (Unix time); alert when it falls behind.",
            labels=["service"],
        )
        for hosted, sample in snapshot.processes:
            sampled.add_metric([hosted], sample["sampled_at"].timestamp())
        yield sampled
        attempts = CounterMetricFamily(
            "zilean_attempts",
            "Finished attempts by job type and outcome (each retry and loop iteration counts).",
            labels=["job_type", "outcome"],
        )
        for (job_type, outcome), count in sorted(snapshot.attempts.items()):
            attempts.add_metric([job_type, outcome], count)
        yield attempts
        depth = GaugeMetricFamily(
            "zilean_queue_jobs",
            "Queue jobs waiting (queued) or running (running), per queue.",
            labels=["queue", "state"],
        )
        for (queue, state), count in sorted(snapshot.queue_depth.items()):
            depth.add_metric([queue, state], count)
        yield depth
        events = CounterMetricFamily(
            "zilean_job_events",
            "Loops stopped at loop_max_iterations and runs of skipped firings, by kind.",
            labels=["kind"],
        )
        for kind, count in sorted(snapshot.events.items()):
            events.add_metric([kind], count)
        yield events


async def _queue_depth(conn: AsyncConnection) -> dict[tuple[str, str], int]:
    """Jobs per known queue and state, zero-filled; the unrouted queue only when used."""
    counted = await queue_depth(await driver_connection(conn))
    known = {str(queue) for queue in Queue}
    depth = {(queue, state): 0 for queue in known for state in QUEUE_STATES}
    for (queue, state), count in counted.items():
        if queue in known or queue == UNROUTED_QUEUE:
            depth[(queue, str(state))] = count
    return depth
