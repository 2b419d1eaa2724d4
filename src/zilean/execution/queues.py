"""The queues, and which service consumes which.

Queue subscription is the isolation boundary: each worker consumes exactly one
queue and the sets are disjoint, so a Groovy job can never run in the Node worker. A
queue is a PgQueuer entrypoint (`queue_engine/`): a worker registers only its own.
"""

from __future__ import annotations

from enum import StrEnum

from zilean.config import ScriptRuntime, Service, script_worker_service
from zilean.jobkinds.definitions import HTTP_QUEUE


class Queue(StrEnum):
    DEFAULT = HTTP_QUEUE  # HTTP jobs, consumed by `zilean worker`
    # One queue per script runtime (SCRIPTS_BASH = "scripts-bash", ...), made from the
    # runtime table. In an enum's body, vars() is the namespace that becomes its members.
    vars().update({f"SCRIPTS_{r.name}": r.queue_name for r in ScriptRuntime})


RUNTIME_QUEUES: dict[ScriptRuntime, Queue] = {r: Queue(r.queue_name) for r in ScriptRuntime}

SERVICE_QUEUES: dict[Service, frozenset[Queue]] = {
    Service.WORKER: frozenset({Queue.DEFAULT}),
    **{script_worker_service(r): frozenset({queue}) for r, queue in RUNTIME_QUEUES.items()},
}
