"""The queues, and which service consumes which.

Queue subscription is the isolation boundary: each worker consumes exactly one
queue and the sets are disjoint, so a Groovy job can never run in the Node worker. A
queue is a PgQueuer entrypoint (`queue_engine/`): a worker registers only its own.
"""

from __future__ import annotations

from enum import StrEnum

from zilean.config import ScriptRuntime, Service


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
