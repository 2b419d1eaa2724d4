"""Every job kind and script runtime, defined once: the table the registry, the queue
router, the workers, `zilean up`, liveness and the process runner all read.

A kind is a `job_type`: which worker runs it (HTTP, or a script runtime), the queue it
waits in, how its scripts are started and what a script file is called, the least
`exec_timeout_ms` it accepts. The job type, runtime, queue and service enums elsewhere
are derived from the two enums here, so adding a runtime is a member of `ScriptRuntime`,
one of `JobType`, a row of `JOB_KINDS`, and its tests.

How an attempt is made is the kind's caller (`jobkinds/http/caller.py`,
`jobkinds/script/caller.py`); everything around the call (read, decide loop or retry,
record, release) is shared (`execution/attempt.py`). This module imports nothing of
Zilean, so that configuration, the registry and the workers can all depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobType(StrEnum):
    HTTP = "http"
    BASH = "bash"
    JAVASCRIPT = "javascript"
    TYPESCRIPT = "typescript"
    GROOVY = "groovy"
    PYTHON = "python"


class ScriptRuntime(StrEnum):
    """A script worker runtime: one `zilean script-worker --runtime` process kind, which
    owns exactly one queue and one service label."""

    BASH = "bash"
    NODE = "node"
    GROOVY = "groovy"
    PYTHON = "python"

    @property
    def queue_name(self) -> str:
        return f"scripts-{self.value}"

    @property
    def service_name(self) -> str:
        return f"script-worker-{self.value}"


HTTP_QUEUE = "default"  # consumed by `zilean worker`
MIN_GROOVY_EXEC_TIMEOUT_MS = 10_000
# `npm ci` of the checkout's runtimes/node: the pinned tsx, so TypeScript needs no build.
INSTALL_TSX = "npm ci --prefix runtimes/node --ignore-scripts"
# Groovy's own switch for Grape: with it, `@Grab` resolves nothing, so a grabbed class
# fails to compile ("unable to resolve class"). Given on the command line, it wins over
# any JAVA_OPTS. It is not a boundary: a script may still load code at run time.
GROOVY_NO_GRAPE = "-Dgroovy.grape.enable=false"

# How to add, on Debian, a program that an interpreter needs besides its own.
NEEDED_PROGRAMS = {"node": "apt-get install nodejs", "java": "apt-get install default-jre-headless"}


@dataclass(frozen=True)
class ScriptProgram:
    """How a script kind's interpreter is started, independent of the machine; whether
    this machine has it is `jobkinds/script/runtimes.resolve`'s answer."""

    name: str  # looked up on PATH
    install: str  # how to add it on Debian, or (when pinned) in the checkout
    options: tuple[str, ...] = ()  # between the program and the script file
    needs: tuple[str, ...] = ()  # other programs that must be on PATH ("node", "java")
    pinned: str = ""  # preferred over PATH: this path under the checkout's runtimes/
    etc: tuple[str, ...] = ()  # what of /etc it reads, bound into the sandbox (globs)


@dataclass(frozen=True)
class JobKind:
    job_type: JobType
    label: str  # how the docs and messages name it
    runtime: ScriptRuntime | None  # the script worker that runs it; None: the HTTP worker
    program: ScriptProgram | None = None  # how its scripts start; None for HTTP
    extension: str = ""  # a script file's suffix, which some interpreters insist on
    min_exec_timeout_ms: int = 1  # a JVM needs 1-2 s just to start

    @property
    def is_script(self) -> bool:
        return self.runtime is not None

    @property
    def queue(self) -> str:
        return HTTP_QUEUE if self.runtime is None else self.runtime.queue_name


JOB_KINDS: dict[JobType, JobKind] = {
    kind.job_type: kind
    for kind in (
        JobKind(JobType.HTTP, "HTTP", None),
        JobKind(
            JobType.BASH, "Bash", ScriptRuntime.BASH,
            ScriptProgram("bash", "apt-get install bash coreutils"),
            ".sh",
        ),
        JobKind(
            JobType.JAVASCRIPT, "JavaScript", ScriptRuntime.NODE,
            ScriptProgram("node", "apt-get install nodejs"),
            ".js",
        ),
        JobKind(
            JobType.TYPESCRIPT, "TypeScript", ScriptRuntime.NODE,
            ScriptProgram(
                "tsx", INSTALL_TSX, needs=("node",), pinned="node/node_modules/.bin/tsx"
            ),
            ".ts",
        ),
        JobKind(
            JobType.GROOVY, "Groovy", ScriptRuntime.GROOVY,
            ScriptProgram(
                "groovy", "apt-get install --no-install-recommends groovy",
                options=(GROOVY_NO_GRAPE,), needs=("java",), etc=("java-*", "groovy"),
            ),
            ".groovy",
            min_exec_timeout_ms=MIN_GROOVY_EXEC_TIMEOUT_MS,
        ),
        JobKind(
            # -I: ignore PYTHON* variables and the user's site-packages, and keep the
            # script's directory (the shared scratch) off sys.path.
            JobType.PYTHON, "Python", ScriptRuntime.PYTHON,
            ScriptProgram("python3", "apt-get install python3", options=("-I",)),
            ".py",
        ),
    )
}  # fmt: skip
SCRIPT_KINDS: dict[JobType, JobKind] = {t: k for t, k in JOB_KINDS.items() if k.is_script}
SCRIPT_PROGRAMS: dict[JobType, ScriptProgram] = {
    t: k.program for t, k in SCRIPT_KINDS.items() if k.program is not None
}
# Nothing consumes this queue: a row with a type this version does not know waits there,
# visible in the queue inspector, instead of running in the wrong worker.
UNROUTED_QUEUE = "unrouted"


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
    return kind.queue if kind is not None else UNROUTED_QUEUE
