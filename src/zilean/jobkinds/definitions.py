"""Every job kind, defined once: the one table the registry, the queue router, the
workers, `zilean up` and liveness read.

A kind is a `job_type`: which worker runs it (HTTP, or a script runtime), the queue it
waits in, what a script file is called, the least `exec_timeout_ms` it accepts. How an
attempt is made is the kind's caller (`jobkinds/http/caller.py`,
`jobkinds/script/caller.py`); everything around the call (read, decide loop or retry,
record, release) is shared (`execution/attempt.py`). Adding a runtime is a row here, its
interpreter in `jobkinds/script/runtimes.py`, and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from zilean.config import ScriptRuntime
from zilean.execution.queues import RUNTIME_QUEUES, Queue
from zilean.registry.kinds import MIN_GROOVY_EXEC_TIMEOUT_MS, JobType

# Nothing consumes this queue: a row with a type this version does not know waits there,
# visible in the queue inspector, instead of running in the wrong worker.
UNROUTED_QUEUE = "unrouted"


@dataclass(frozen=True)
class JobKind:
    job_type: JobType
    label: str  # how the docs and messages name it
    runtime: ScriptRuntime | None  # the script worker that runs it; None: the HTTP worker
    extension: str = ""  # a script file's suffix, which some interpreters insist on
    min_exec_timeout_ms: int = 1  # a JVM needs 1-2 s just to start

    @property
    def is_script(self) -> bool:
        return self.runtime is not None

    @property
    def queue(self) -> Queue:
        return Queue.DEFAULT if self.runtime is None else RUNTIME_QUEUES[self.runtime]


JOB_KINDS: dict[JobType, JobKind] = {
    kind.job_type: kind
    for kind in (
        JobKind(JobType.HTTP, "HTTP", None),
        JobKind(JobType.BASH, "Bash", ScriptRuntime.BASH, ".sh"),
        JobKind(JobType.JAVASCRIPT, "JavaScript", ScriptRuntime.NODE, ".js"),
        JobKind(JobType.TYPESCRIPT, "TypeScript", ScriptRuntime.NODE, ".ts"),
        JobKind(
            JobType.GROOVY,
            "Groovy",
            ScriptRuntime.GROOVY,
            ".groovy",
            min_exec_timeout_ms=MIN_GROOVY_EXEC_TIMEOUT_MS,
        ),
        JobKind(JobType.PYTHON, "Python", ScriptRuntime.PYTHON, ".py"),
    )
}


def kind_of(job_type: str) -> JobKind | None:
    """The kind of a stored `job_type`, or None for one this version does not know."""
    try:
        return JOB_KINDS[JobType(job_type)]
    except ValueError:
        return None


def kinds_run_by(runtime: ScriptRuntime | None) -> list[JobKind]:
    """The kinds one worker runs: the HTTP worker's (None) or a script runtime's."""
    return [kind for kind in JOB_KINDS.values() if kind.runtime == runtime]


def queue_for(job_type: str) -> str:
    """The queue a job type's attempts go to."""
    kind = kind_of(job_type)
    return str(kind.queue) if kind is not None else UNROUTED_QUEUE
