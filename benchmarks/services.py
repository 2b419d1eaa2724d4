"""Starting the processes scenarios measure: the target, Zilean's services, the baselines.

Zilean's services run as the real CLI (`python -m zilean ...`) with the narrowed
environment a deployment gives them; each start waits on a readiness condition (a
queue consumer listening on its channel, a registered Procrastinate worker, a healthy
`/healthz`, a printed line), never on a fixed sleep. The baselines run as processes
of their own too, so each one's CPU is metered apart: the limit (`raw_queue.py`), the
alternative (`alternative.py`), the raw engine (`raw_engine.py`) and the bare script
loop (`bare_scripts.py`).
"""

from __future__ import annotations

import base64
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import alternative, bare_scripts, raw_engine
from benchmarks.harness import BenchError, wait_until
from benchmarks.processes import ManagedProcess, Processes
from benchmarks.queue import listening
from benchmarks.seeding import BENCH_KEY
from benchmarks.target import LOOP_PATH
from zilean.config import ScriptRuntime
from zilean.crypto.keys import derive_script_key, encode_key
from zilean.execution.queues import RUNTIME_QUEUES, Queue

REPO_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0  # seconds for any service to become ready
# What every child needs from the OS to run at all (as `zilean up` passes on).
_OS_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")


def child_env(**extra: str) -> dict[str, str]:
    """A clean environment: the OS basics, the repo on the path, and `extra`."""
    env = {name: os.environ[name] for name in _OS_ENVIRONMENT if name in os.environ}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_target(processes: Processes) -> tuple[ManagedProcess, str]:
    """Start the HTTP target; return it and its base URL."""
    process = processes.spawn(
        "http-target", [sys.executable, "-m", "benchmarks.target"], child_env()
    )
    match = await process.wait_for_output(r"listening on (http://\S+)", within=START_TIMEOUT)
    return process, match.group(1)


async def _ready_when(
    processes: Processes,
    name: str,
    argv: list[str],
    env: dict[str, str],
    count: Callable[[], Awaitable[int]],
) -> ManagedProcess:
    """Spawn a process and wait until `count` (of listeners, of workers) goes up."""
    before = await count()
    process = processes.spawn(name, argv, env)

    async def ready() -> bool:
        if not process.alive():
            raise BenchError(f"{name} exited with {process.popen.returncode}:\n{process.tail()}")
        return await count() > before

    await wait_until(ready, within=START_TIMEOUT, what=f"{name} to be ready")
    return process


async def start_worker(
    processes: Processes,
    engine: AsyncEngine,
    database_url: str,
    concurrency: int,
    name: str = "zilean-worker",
) -> ManagedProcess:
    """Start the real HTTP worker, `zilean worker`; ready once it listens on its queue."""
    env = child_env(
        DATABASE_URL=database_url,
        SETTINGS_ENCRYPTION_KEY=BENCH_KEY,
        WORKER_MAX_CONCURRENCY=str(concurrency),
    )
    argv = [sys.executable, "-m", "zilean", "worker"]
    return await _ready_when(processes, name, argv, env, lambda: listening(engine, Queue.DEFAULT))


async def start_script_worker(
    processes: Processes, engine: AsyncEngine, database_url: str, runtime: ScriptRuntime
) -> ManagedProcess:
    """Start the real `zilean script-worker --runtime R` (its default concurrency, no
    sandbox); ready once it listens on the runtime's queue."""
    script_key = encode_key(derive_script_key(base64.b64decode(BENCH_KEY)))
    env = child_env(DATABASE_URL=database_url, SCRIPT_SECRETS_KEY=script_key)
    argv = [sys.executable, "-m", "zilean", "script-worker", "--runtime", str(runtime)]
    queue = RUNTIME_QUEUES[runtime]
    return await _ready_when(
        processes, f"zilean-script-worker-{runtime}", argv, env, lambda: listening(engine, queue)
    )


async def start_bare_scripts(
    processes: Processes, loop: str, body: str, count: int, concurrency: int
) -> ManagedProcess:
    """Start the script baseline (`bare_scripts.py`) on `loop`, waiting for its first round."""
    argv = [
        sys.executable, "-m", "benchmarks.bare_scripts", "--loop", loop,
        "--count", str(count), "--concurrency", str(concurrency), "--body", body,
    ]  # fmt: skip
    process = processes.spawn(f"bare-scripts-{loop}", argv, child_env())
    await process.wait_for_output(rf"(?m)^{bare_scripts.READY}$", within=START_TIMEOUT)
    return process


async def start_alternative(
    processes: Processes,
    engine: AsyncEngine,
    database_url: str,
    target_url: str,
    concurrency: int,
) -> ManagedProcess:
    """Start the bare Procrastinate worker in its own database (`engine`, `database_url`)."""
    env = child_env(DATABASE_URL=database_url, BENCH_TARGET_URL=target_url)
    argv = [
        sys.executable, "-m", "benchmarks.alternative",
        "--queue", alternative.QUEUE, "--concurrency", str(concurrency),
    ]  # fmt: skip
    return await _ready_when(
        processes, "alternative", argv, env, lambda: alternative.worker_count(engine)
    )


async def start_limit(
    processes: Processes, database_url: str, target_url: str, concurrency: int
) -> ManagedProcess:
    """Start the raw queue loop on `database_url`'s `bench_raw_queue` (created already)."""
    argv = [
        sys.executable, "-m", "benchmarks.raw_queue", "--concurrency", str(concurrency),
        "--url", target_url + "/", "--chain-url", target_url + LOOP_PATH,
    ]  # fmt: skip
    process = processes.spawn("limit", argv, child_env(DATABASE_URL=database_url))
    await process.wait_for_output(r"(?m)^ready$", within=START_TIMEOUT)
    return process


async def start_raw_engine(
    processes: Processes, engine: AsyncEngine, database_url: str, concurrency: int
) -> ManagedProcess:
    """Start PgQueuer's own QueueManager on the `bench-raw` entrypoint."""
    argv = [sys.executable, "-m", "benchmarks.raw_engine", "--concurrency", str(concurrency)]
    return await _ready_when(
        processes,
        "raw-engine",
        argv,
        child_env(DATABASE_URL=database_url),
        lambda: listening(engine, raw_engine.ENTRYPOINT),
    )


async def start_core(processes: Processes, database_url: str) -> tuple[ManagedProcess, str]:
    """Start the real `zilean core` (API, scheduler, sweeps); return it and its base URL."""
    port = free_port()
    env = child_env(
        DATABASE_URL=database_url,
        SETTINGS_ENCRYPTION_KEY=BENCH_KEY,
        CORE_ADDR=f"127.0.0.1:{port}",
    )
    process = processes.spawn("zilean-core", [sys.executable, "-m", "zilean", "core"], env)
    base_url = f"http://127.0.0.1:{port}"
    await wait_healthy(process, base_url)
    return process, base_url


async def wait_healthy(process: ManagedProcess, base_url: str) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:

        async def healthy() -> bool:
            if not process.alive():
                raise BenchError(f"{process.name} exited early:\n{process.tail()}")
            try:
                return (await client.get(f"{base_url}/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(healthy, within=START_TIMEOUT, what=f"{process.name} /healthz")


async def start_webhook(processes: Processes, database_url: str) -> tuple[ManagedProcess, str]:
    """Start the real `zilean webhook`, trusting X-Forwarded-For so the suite can spread
    its calls over many client addresses; return it and its base URL."""
    port = free_port()
    env = child_env(
        DATABASE_URL=database_url,
        WEBHOOK_ADDR=f"127.0.0.1:{port}",
        WEBHOOK_TRUST_PROXY_HEADERS="1",
    )
    process = processes.spawn("zilean-webhook", [sys.executable, "-m", "zilean", "webhook"], env)
    base_url = f"http://127.0.0.1:{port}"
    await wait_healthy(process, base_url)
    return process, base_url
