"""Each process samples itself at start-up and then once a minute, once for all it hosts.

A sample is stored under every service label the process hosts, in one statement, with
`process_services` naming them all. `zilean up` serves core, ui, mcp and webhook from
one process and runs its script runtimes in another: each such process is measured once,
so its CPU is not counted once per service (see `sampling`).

The Go product reported heap, OS-obtained bytes and goroutines; Python's honest
equivalents are anonymous and total resident memory and the event loop's tasks, beside
the interpreter's allocated blocks and OS threads (docs/monitoring.md says what each
figure means). A sample that cannot be written is logged and skipped: monitoring never
stops a service.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields

import psutil

from zilean.config import Service
from zilean.db.direct import short_connection
from zilean.loops import every

# Says whether a service answers its own health check (`api.health.answers_healthz`).
Probe = Callable[[], Awaitable[bool]]
SAMPLE_INTERVAL = 60.0  # seconds
STOP_TIMEOUT = 2.0  # seconds a stopping sampler may spend finishing its write

# The services an enclosing `sampling` block already samples, in this task's context.
_SAMPLED: ContextVar[frozenset[Service]] = ContextVar("zilean_sampled", default=frozenset())


@dataclass(frozen=True)
class ProcessSample:
    hostname: str
    pid: int
    cpu_percent: float  # of one core, averaged since the previous sample
    rss_bytes: int
    anon_rss_bytes: int  # resident and not file-backed: heap, arenas, stacks
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
            memory = process.memory_info()
            # Linux splits resident pages into file-backed (`shared`: code, libraries,
            # shared memory) and the rest; elsewhere the split is unknown and all counts.
            file_backed = getattr(memory, "shared", 0)
            return ProcessSample(
                hostname=self._hostname,
                pid=process.pid,
                cpu_percent=round(max(percent, 0.0), 3),
                rss_bytes=memory.rss,
                anon_rss_bytes=max(memory.rss - file_backed, 0),
                python_allocated_blocks=sys.getallocatedblocks(),
                threads=process.num_threads(),
                asyncio_tasks=len(asyncio.all_tasks()),
                open_fds=process.num_fds(),
            )


_FIELDS = tuple(field.name for field in fields(ProcessSample))
# One row per hosted label, all in one statement: they share `sampled_at` (now()) exactly.
_RECORD = (
    f"INSERT INTO worker_metrics (service, process_services, {', '.join(_FIELDS)})"  # noqa: S608 (constants)
    f" SELECT live, %(hosted)s, {', '.join(f'%({name})s' for name in _FIELDS)}"
    " FROM unnest(%(live)s::text[]) AS live"
)


async def record_sample(
    database_url: str,
    services: Sequence[Service],
    sample: ProcessSample,
    *,
    hosted: Sequence[Service] | None = None,
) -> None:
    """Store one sample under each of `services`, on a connection of its own (once a
    minute: not worth keeping one open). `hosted` (default: `services`) is every label
    the process hosts, some of which may have failed their health check this time."""
    hosted = services if hosted is None else hosted
    name = f"zilean-{hosted[0]}"
    async with short_connection(database_url, application_name=name) as conn:
        await conn.execute(
            _RECORD,
            {
                "live": [str(s) for s in services],
                "hosted": [str(s) for s in hosted],
                **asdict(sample),
            },
        )


async def run_sampling(
    database_url: str,
    services: Sequence[Service],
    stop: asyncio.Event,
    *,
    probes: Mapping[Service, Probe] | None = None,
    interval: float = SAMPLE_INTERVAL,
) -> None:
    """Store a sample of this process now and every `interval` seconds until `stop` is set.

    A service with a probe in `probes` is sampled only when its probe passes, so its
    samples mean "answered its own health check", not merely "its process is running".
    """
    sampler = ProcessSampler()
    probes = probes or {}

    async def step() -> None:
        sample = sampler.sample()
        live = [s for s in services if s not in probes or await _passes(probes[s])]
        if live:
            await record_sample(database_url, live, sample, hosted=services)

    await every(
        interval,
        stop,
        step,
        failure="could not record a metrics sample",
        action="metrics.sample_failed",
        service=",".join(services),
    )


async def _passes(probe: Probe) -> bool:
    try:
        return await probe()
    except Exception:  # a probe that breaks is a failed probe, never a stopped sampler
        return False


@asynccontextmanager
async def sampling(
    database_url: str, *services: Service, probes: Mapping[Service, Probe] | None = None
) -> AsyncIterator[asyncio.Event]:
    """Sample this process under `services` in the background while the block runs.

    A host of several services opens one block naming them all around theirs (the
    origin of `zilean up`, a worker process running several runtimes). A block nested
    in it, in the same task, samples only the services not already covered, so a
    service that always asks for its own samples costs nothing extra when hosted.

    With `probes`, the block yields an event to set once its services serve: the first
    sample waits for it, so a service is not probed before its own start-up has run.
    """
    serving = asyncio.Event()
    if not probes:
        serving.set()
    covered = _SAMPLED.get()
    wanted = [service for service in dict.fromkeys(services) if service not in covered]
    if not wanted:
        yield serving
        return
    token = _SAMPLED.set(covered | frozenset(wanted))
    stop = asyncio.Event()
    label = ",".join(wanted)

    async def run() -> None:
        await serving.wait()
        await run_sampling(database_url, wanted, stop, probes=probes)

    task = asyncio.create_task(run(), name=f"zilean-sampling-{label}")
    try:
        yield serving
    finally:
        _SAMPLED.reset(token)
        serving.set()  # a block that never served lets its sampler see the stop at once
        stop.set()
        # The loop ends within its current write; a hung database call is cancelled.
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
