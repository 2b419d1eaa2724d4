"""The queues, and which service consumes which.

Queue subscription is the isolation boundary: each worker consumes exactly one
queue and the sets are disjoint, so a Groovy job can never run in the Node worker.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import procrastinate
import psycopg

from zilean.config import ScriptRuntime, Service
from zilean.db.engine import POOL_TIMEOUT
from zilean.db.urls import libpq_url


class Queue(StrEnum):
    DEFAULT = "default"  # HTTP jobs, consumed by `zilean worker`
    SCRIPTS_BASH = "scripts-bash"
    SCRIPTS_NODE = "scripts-node"
    SCRIPTS_GROOVY = "scripts-groovy"
    SCRIPTS_PYTHON = "scripts-python"


RUNTIME_QUEUES: dict[ScriptRuntime, Queue] = {
    ScriptRuntime.BASH: Queue.SCRIPTS_BASH,
    ScriptRuntime.NODE: Queue.SCRIPTS_NODE,
    ScriptRuntime.GROOVY: Queue.SCRIPTS_GROOVY,
    ScriptRuntime.PYTHON: Queue.SCRIPTS_PYTHON,
}

# Where each job type's attempts are queued. JavaScript and TypeScript share the Node worker.
JOB_TYPE_QUEUES: dict[str, Queue] = {
    "http": Queue.DEFAULT,
    "bash": Queue.SCRIPTS_BASH,
    "javascript": Queue.SCRIPTS_NODE,
    "typescript": Queue.SCRIPTS_NODE,
    "groovy": Queue.SCRIPTS_GROOVY,
    "python": Queue.SCRIPTS_PYTHON,
}
# Nothing consumes this queue: a row with a type this version does not know waits there,
# visible in the queue inspector, instead of running in the wrong worker.
UNROUTED_QUEUE = "unrouted"


def queue_for(job_type: str) -> str:
    """Return the queue a job type's attempts go to."""
    queue = JOB_TYPE_QUEUES.get(job_type)
    return str(queue) if queue is not None else UNROUTED_QUEUE


SERVICE_QUEUES: dict[Service, frozenset[Queue]] = {
    Service.WORKER: frozenset({Queue.DEFAULT}),
    **{runtime.service: frozenset({queue}) for runtime, queue in RUNTIME_QUEUES.items()},
}


async def _autocommit(connection: psycopg.AsyncConnection[Any]) -> None:
    await connection.set_autocommit(True)


def create_queue_app(database_url: str, *, max_connections: int = 10) -> procrastinate.App:
    """Return a Procrastinate app bound to our database, with a short pool timeout.

    The short timeout turns a stalled pool (after a Postgres restart) into an error
    the worker's supervisor can handle, instead of a silent hang. Connections are in
    autocommit: every query Procrastinate sends is one statement (a function call), so
    psycopg's implicit BEGIN and COMMIT were two extra round-trips per fetch and finish.
    """
    connector = procrastinate.PsycopgConnector(
        conninfo=libpq_url(database_url),
        min_size=1,
        max_size=max_connections,
        timeout=POOL_TIMEOUT,
        configure=_autocommit,
    )
    return procrastinate.App(connector=connector)
