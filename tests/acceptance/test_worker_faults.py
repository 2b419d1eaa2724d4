"""The real worker under faults: SIGKILL, a Postgres restart, a storm of killed backends,
a 40-second outage and half-open connections.

Each test runs its own embedded Postgres (never the session's shared one), a `zilean
worker` subprocess against it, a producer queueing about five fast HTTP attempts a
second, spread over a few jobs, and one job looping with `loop_delay_ms: 0` whose
endpoint answers in `LOOP_CALL` (each iteration is claimed by the recording of the one
before, `docs/engine.md`). What each checks, as `docs/faults.md` states it:

- work resumes: attempts are recorded again within `RECOVERY_BOUND` of the fault's end
  (of its start, for a half-open connection, which never ends by itself), with no
  process restart (except after SIGKILL, where a new worker is started);
- nothing is lost or stuck: `SETTLE_BOUND` after producing stops, no queue job waits or
  runs and no attempt is left `running`;
- no recorded attempt's call is made twice: the targets never receive more requests
  than there are attempt rows (a call repeated for one queue job would add a request
  and no row).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.cli import RunningProcess, base_environment, spawn_cli
from tests.support.servers import live_server
from tests.support.target import HttpTarget, http_target
from zilean.db.embedded import embedded_postgres
from zilean.db.engine import create_engine, driver_connection
from zilean.db.migrate import migrate
from zilean.db.tables import job_attempts, scheduled_jobs
from zilean.db.urls import libpq_url
from zilean.execution.enqueue import enqueue_attempts
from zilean.execution.payload import AttemptArgs
from zilean.queue_engine.statements import unfinished

pytestmark = pytest.mark.acceptance

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
PRODUCE_EVERY = 0.2  # seconds: five attempts a second
JOBS = 5  # the producer round-robins over these, so one blocked row cannot stop it all
RECOVERY_BOUND = 15.0  # seconds until attempts are recorded again
# Seconds after producing stops until nothing waits, runs or is left `running`: a claim
# lost in the fault is re-picked after the production heartbeat timeout (10 s).
SETTLE_BOUND = 30.0
OUTAGE = 40.0  # seconds Postgres is down in the outage test
FREEZE = 25.0  # seconds the worker's backends stay frozen in the half-open test
LOOP_CALL = 0.05  # seconds the looping job's endpoint takes: about 20 iterations a second


@contextmanager
def own_postgres(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    pgdata = tmp_path / "pgdata"
    with embedded_postgres(pgdata) as url:
        migrate(url)
        yield url, pgdata


@dataclass
class Stream:
    """A worker, its target and a producer, running against one database."""

    engine: AsyncEngine
    target: HttpTarget
    worker: RunningProcess
    env: dict[str, str]
    processes: contextlib.ExitStack

    loop: LoopTarget

    def kill_and_replace(self) -> None:
        """SIGKILL the worker mid-stream and start another in its place."""
        self.worker.stop(signal.SIGKILL)
        self.worker = self.processes.enter_context(spawn_cli(["worker"], self.env))
        self.worker.wait_for("queue.listening", timeout=30)


class LoopTarget:
    """The looping job's endpoint: asks for more until `finish`, then for nothing."""

    def __init__(self) -> None:
        self.requests = 0
        self._looping = True

    def finish(self) -> None:
        self._looping = False

    async def _handle(self, request: Request) -> Response:
        self.requests += 1
        await asyncio.sleep(LOOP_CALL)
        remaining = 1 if self._looping else 0
        return Response(f'{{"result": {{"remaining": {remaining}}}}}')

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/loop", self._handle)])


async def _start_loop(engine: AsyncEngine, url: str) -> None:
    """Create the looping job and queue its first iteration."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs),
            [
                {
                    "id": job_id,
                    "name": "looping",
                    "job_type": "http",
                    "url": url,
                    "exec_timeout_ms": 2_000,
                    "overlap_policy": "skip",
                    "loop_enabled": True,
                    "loop_delay_ms": 0,
                    "loop_max_iterations": 100_000,
                    "retry_base_delay_ms": 100,
                    "retry_max_attempts": 10,
                }
            ],
        )
        args = AttemptArgs(job_id=str(job_id), loop_iteration=0, pool_index=0, max_attempts=10)
        await enqueue_attempts(conn, job_id=job_id, job_type="http", members=[args])


async def _http_jobs(engine: AsyncEngine, url: str) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(JOBS)]
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs),
            [
                {
                    "id": job_id,
                    "name": f"steady {n}",
                    "job_type": "http",
                    "url": url,
                    "exec_timeout_ms": 2_000,
                    "overlap_policy": "allow",
                }
                for n, job_id in enumerate(ids)
            ],
        )
    return ids


async def _produce(engine: AsyncEngine, job_ids: list[uuid.UUID], stop: asyncio.Event) -> None:
    """Queue one attempt every PRODUCE_EVERY; a failed insert (mid-fault) is skipped."""
    turn = 0
    while not stop.is_set():
        job_id = job_ids[turn % len(job_ids)]
        turn += 1
        args = AttemptArgs(job_id=str(job_id), loop_iteration=0, pool_index=0, max_attempts=1)
        with contextlib.suppress(SQLAlchemyError, OSError, TimeoutError, psycopg.Error):
            async with asyncio.timeout(2.0), engine.begin() as conn:
                await enqueue_attempts(conn, job_id=job_id, job_type="http", members=[args])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=PRODUCE_EVERY)


async def _recorded_since(engine: AsyncEngine, since: float) -> int:
    """Attempts finished after the epoch second `since` (0 while the database is away)."""
    with contextlib.suppress(SQLAlchemyError, OSError, psycopg.Error):
        async with asyncio.timeout(2.0), engine.connect() as conn:
            count = await conn.scalar(
                select(func.count()).where(job_attempts.c.finalized_at > func.to_timestamp(since))
            )
            return int(count or 0)
    return 0


async def _has_recorded(engine: AsyncEngine, since: float) -> bool:
    return await _recorded_since(engine, since) > 0


async def _settled(engine: AsyncEngine) -> bool:
    with contextlib.suppress(SQLAlchemyError, OSError, psycopg.Error):
        async with engine.connect() as conn:
            waiting = await unfinished(await driver_connection(conn))
            running = await conn.scalar(
                select(func.count()).where(job_attempts.c.state == "running")
            )
        return waiting == 0 and running == 0
    return False


async def _within(seconds: float, condition: Callable[[], Awaitable[bool]]) -> float:
    """Poll `condition` (a database question: nothing to await) until it holds."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if await condition():
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"not true within {seconds}s")


@asynccontextmanager
async def steady_stream(url: str) -> AsyncIterator[Stream]:
    """A worker, a target and a producer against `url`; on the way out, check the three
    guarantees (resumed in-process, settled, no call without an attempt row)."""
    engine = create_engine(url)
    stop = asyncio.Event()
    env = base_environment(DATABASE_URL=url, SETTINGS_ENCRYPTION_KEY=KEY)
    producing: asyncio.Task[None] | None = None
    loop = LoopTarget()
    try:
        with (
            http_target() as target,
            live_server(loop.app()) as loop_url,
            contextlib.ExitStack() as processes,
        ):
            worker = processes.enter_context(spawn_cli(["worker"], env))
            worker.wait_for("queue.listening", timeout=30)
            job_ids = await _http_jobs(engine, f"{target.base_url}/work")
            await _start_loop(engine, f"{loop_url}/loop")
            producing = asyncio.create_task(_produce(engine, job_ids, stop))
            started = time.time()
            await _within(10.0, lambda: _has_recorded(engine, started))
            stream = Stream(engine, target, worker, env, processes, loop)
            yield stream
            stop.set()
            loop.finish()
            await producing
            await _within(SETTLE_BOUND, lambda: _settled(engine))
            async with engine.connect() as conn:
                rows = await conn.scalar(select(func.count()).select_from(job_attempts))
                looped = (
                    (
                        await conn.execute(
                            select(job_attempts.c.state)
                            .join(scheduled_jobs, scheduled_jobs.c.id == job_attempts.c.job_id)
                            .where(scheduled_jobs.c.name == "looping")
                            .order_by(job_attempts.c.id)
                        )
                    )
                    .scalars()
                    .all()
                )
            assert rows
            # The loop went on through the fault (an iteration lost in it is retried) and
            # ended when its endpoint said so.
            assert len(looped) >= 2
            assert looped[-1] == "succeeded"
            calls = len(target.requests) + loop.requests
            assert calls <= rows, "a recorded attempt's call was made twice"
            # Recovered in-process (after SIGKILL: the replacement did).
            assert stream.worker.process.poll() is None, stream.worker.output
    finally:
        stop.set()
        if producing is not None:
            producing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producing
        await engine.dispose()


def _pg_ctl(pgdata: Path, *args: str) -> None:
    """Run the server's own pg_ctl, as the user owning its data (not root)."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    owner = pgdata.stat().st_uid
    pg_ctl(
        ["-w", "-m", "fast", "-l", str(pgdata / "pg_ctl.log"), *args],
        pgdata=pgdata,
        timeout=60,
        user=owner if owner != os.getuid() else None,
    )


def _server_options(pgdata: Path) -> str:
    """The options the server was started with (its socket directory, its port), which a
    plain `pg_ctl start` would not reuse as `pg_ctl restart` does."""
    words = shlex.split((pgdata / "postmaster.opts").read_text())
    options = words[1:]  # the postgres binary first
    if "-D" in options:
        at = options.index("-D")
        del options[at : at + 2]
    return shlex.join(options)


def _worker_backends(url: str, *, idle_only: bool = False) -> list[int]:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'zilean-worker' AND (state = 'idle' OR NOT %s)",
            (idle_only,),
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def _storm(url: str, seconds: float) -> None:
    """Terminate every other backend of the database every 200 ms for `seconds`."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        while time.monotonic() < deadline:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            time.sleep(0.2)


async def test_a_killed_worker_is_replaced_and_its_attempts_are_settled(tmp_path: Path) -> None:
    """The killed worker's claimed jobs are re-picked by the new one after the heartbeat
    timeout: those it had started are recorded as lost, the others simply run."""
    with own_postgres(tmp_path) as (url, _):
        async with steady_stream(url) as stream:
            await asyncio.sleep(1.0)
            stream.kill_and_replace()
            back = time.time()
            recovery = await _within(RECOVERY_BOUND, lambda: _has_recorded(stream.engine, back))
            print(f"SIGKILL: attempts recorded again {recovery:.1f}s after the new worker")


async def _restart(url: str, pgdata: Path) -> None:
    await asyncio.to_thread(_pg_ctl, pgdata, "restart")


async def _kill_backends(url: str, pgdata: Path) -> None:
    await asyncio.to_thread(_storm, url, 5.0)


async def _outage(url: str, pgdata: Path) -> None:
    options = _server_options(pgdata)
    await asyncio.to_thread(_pg_ctl, pgdata, "stop")
    await asyncio.sleep(OUTAGE)  # the fault itself: Postgres is down this long
    await asyncio.to_thread(_pg_ctl, pgdata, "start", "-o", options)


@pytest.mark.parametrize(
    "fault",
    [
        _restart,  # pg_ctl restart -m fast: every connection drops, Postgres is back at once
        _kill_backends,  # pg_terminate_backend of every other backend every 200 ms for 5 s
        _outage,  # pg_ctl stop, 40 s, pg_ctl start
    ],
    ids=["postgres restart", "backend-kill storm", "40-second outage"],
)
async def test_the_worker_recovers_from_a_database_fault(
    tmp_path: Path, fault: Callable[[str, Path], Awaitable[None]]
) -> None:
    with own_postgres(tmp_path) as (url, pgdata):
        async with steady_stream(url) as stream:
            await asyncio.sleep(2.0)
            await fault(url, pgdata)
            back = time.time()
            recovery = await _within(RECOVERY_BOUND, lambda: _has_recorded(stream.engine, back))
            print(f"{fault.__name__}: attempts recorded again {recovery:.1f}s after the fault")


async def test_the_worker_replaces_half_open_connections(tmp_path: Path) -> None:
    """Every idle connection of the worker stops answering, as behind a dead link: no
    error ever comes, so only the worker's own deadlines and probes can notice."""
    with own_postgres(tmp_path) as (url, _):
        async with steady_stream(url) as stream:
            await asyncio.sleep(2.0)
            frozen = _worker_backends(url, idle_only=True)
            assert frozen
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            try:
                froze = time.time()
                recovery = await _within(
                    RECOVERY_BOUND,
                    lambda: _recorded_on_fresh_connections(stream.engine, froze, frozen, url),
                )
                print(f"half-open: attempts recorded again {recovery:.1f}s after the freeze")
                await asyncio.sleep(FREEZE - recovery)  # keep them frozen: they never answer
            finally:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)


async def _recorded_on_fresh_connections(
    engine: AsyncEngine, since: float, frozen: list[int], url: str
) -> bool:
    """Attempts are recorded again, and the worker works on connections it opened anew."""
    if not await _has_recorded(engine, since):
        return False
    return bool(set(_worker_backends(url)) - set(frozen))
