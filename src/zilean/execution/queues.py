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

SERVICE_QUEUES: dict[Service, frozenset[Queue]] = {
    Service.WORKER: frozenset({Queue.DEFAULT}),
    **{runtime.service: frozenset({queue}) for runtime, queue in RUNTIME_QUEUES.items()},
}
