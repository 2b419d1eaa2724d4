"""Each service samples its own process at start-up and then once a minute.

The Go product reported heap, OS-obtained bytes and goroutines; Python's honest
equivalents are resident memory, the interpreter's allocated blocks, OS threads and
the event loop's tasks (see docs/monitoring.md for what each figure means). A sample
that cannot be written is logged and skipped: monitoring never stops a service.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, fields

import psutil

from zilean.config import Service
from zilean.db.direct import short_connection
from zilean.loops import every

SAMPLE_INTERVAL = 60.0  # seconds


@dataclass(frozen=True)
class ProcessSample:
    hostname: str
    pid: int
    cpu_percent: float  # of one core, averaged since the previous sample
    rss_bytes: int
    python_allocated_blocks: int
    threads: int
    asyncio_tasks: int
    open_fds: int


class ProcessSampler:
    """Reads this process's figures; CPU is the share of one core between two reads.

    The first read averages over the process's whole life, so the start-up sample
    carries a real figure instead of psutil's meaningless first 0.0.
    """

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._hostname = socket.gethostname()
        self._last_cpu = 0.0
        self._last_wall = self._process.create_time()

    def sample(self) -> ProcessSample:
        process = self._process
        with process.oneshot():
            times = process.cpu_times()
            cpu = times.user + times.system
            wall = time.time()
            elapsed = wall - self._last_wall
            percent = 100.0 * (cpu - self._last_cpu) / elapsed if elapsed > 0 else 0.0
            self._last_cpu, self._last_wall = cpu, wall
            return ProcessSample(
                hostname=self._hostname,
                pid=process.pid,
                cpu_percent=round(max(percent, 0.0), 3),
                rss_bytes=process.memory_info().rss,
                python_allocated_blocks=sys.getallocatedblocks(),
                threads=process.num_threads(),
                asyncio_tasks=len(asyncio.all_tasks()),
                open_fds=process.num_fds(),
            )


_FIELDS = tuple(field.name for field in fields(ProcessSample))
_RECORD = (
    f"INSERT INTO worker_metrics (service, {', '.join(_FIELDS)})"  # noqa: S608 (constants)
    f" VALUES (%(service)s, {', '.join(f'%({name})s' for name in _FIELDS)})"
)


async def record_sample(database_url: str, service: Service, sample: ProcessSample) -> None:
    """Write one sample, on a connection of its own (once a minute: not worth keeping)."""
    async with short_connection(database_url, application_name=f"zilean-{service}") as conn:
        await conn.execute(_RECORD, {"service": str(service), **asdict(sample)})


async def run_sampling(
    database_url: str,
    service: Service,
    stop: asyncio.Event,
    *,
    interval: float = SAMPLE_INTERVAL,
) -> None:
    """Write a sample now and every `interval` seconds until `stop` is set."""
    sampler = ProcessSampler()

    async def step() -> None:
        await record_sample(database_url, service, sampler.sample())

    await every(
        interval,
        stop,
        step,
        failure="could not record a metrics sample",
        action="metrics.sample_failed",
        service=str(service),
    )


@asynccontextmanager
async def sampling(database_url: str, service: Service) -> AsyncIterator[None]:
    """Sample `service` in the background for as long as the block runs."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_sampling(database_url, service, stop), name=f"zilean-sampling-{service}"
    )
    try:
        yield
    finally:
        stop.set()
        # The loop ends within its current write; a hung database call is cancelled.
        done, _ = await asyncio.wait({task}, timeout=2.0)  # seconds
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
