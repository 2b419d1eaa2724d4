"""Whether this machine can run each script job type, and with which argv.

How a kind's interpreter starts (its program, options, what else it needs) is plain data
in the job kind table (`jobkinds/definitions.py`). What depends on the machine (is the
program on PATH, where Java lives) is answered by `resolve`, which `zilean up`, the
script worker's start-up report and the process runner share, so the three never
disagree about what "installed" means.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from zilean.jobkinds.definitions import (
    NEEDED_PROGRAMS,
    SCRIPT_KINDS,
    SCRIPT_PROGRAMS,
    JobKind,
    JobType,
    ScriptProgram,
    ScriptRuntime,
)

log = structlog.get_logger(__name__)

# The checkout's pinned programs (`make runtimes`); absent in an installed package, where
# the program on PATH is used instead.
CHECKOUT_RUNTIMES = Path(__file__).resolve().parents[4] / "runtimes"
# Up to five JVMs run at once per worker (SCRIPT_WORKER_CONCURRENCY), each sizing its heap
# from the memory limit: 15% each keeps five under the limit with room for the rest of
# each JVM. The serial collector starts no GC threads, which suits short scripts.
JAVA_OPTS = "-XX:MaxRAMPercentage=15 -XX:+UseSerialGC"


@dataclass(frozen=True)
class Interpreter:
    """How this machine runs one job type's scripts, or why it cannot."""

    kind: JobKind
    argv: tuple[str, ...]  # the program and its options; the script file and args follow
    missing: tuple[str, ...] = ()  # what it lacks here, each with how to add it
    environment: dict[str, str] = field(default_factory=dict)  # added to the script's env

    @property
    def available(self) -> bool:
        return not self.missing

    def command(self, script: Path, args: tuple[str, ...] | list[str] = ()) -> list[str]:
        """Return the argv that runs `script` with `args`."""
        return [*self.argv, str(script), *args]


def java_home(environ: Mapping[str, str]) -> Path | None:
    """Return the Java installation Groovy runs on: JAVA_HOME if it holds a java, else the
    one `java` on PATH belongs to (through Debian's alternatives links), else None."""
    configured = environ.get("JAVA_HOME", "").strip()
    if configured and (Path(configured) / "bin" / "java").is_file():
        return Path(configured)
    java = shutil.which("java", path=environ.get("PATH"))
    if java is None:
        return None
    return Path(java).resolve().parent.parent


def _program(program: ScriptProgram, path: str | None) -> str | None:
    """Return the argv[0] that starts `program`, or None when it is not installed."""
    if program.pinned and os.access(CHECKOUT_RUNTIMES / program.pinned, os.X_OK):
        return str(CHECKOUT_RUNTIMES / program.pinned)
    return program.name if shutil.which(program.name, path=path) else None


def _not_found(program: str, install: str) -> str:
    return f"`{program}` not found on PATH (on Debian: {install})"


def resolve(job_type: JobType, environ: Mapping[str, str] | None = None) -> Interpreter:
    """Return how `environ`'s PATH (default: this process's) runs `job_type` scripts.

    When something is missing, `missing` names each missing part and how to add it.
    """
    environ = os.environ if environ is None else environ
    kind, program = SCRIPT_KINDS[job_type], SCRIPT_PROGRAMS[job_type]
    path = environ.get("PATH")
    found = _program(program, path)
    reasons: list[str] = []
    if found is None and program.pinned:
        reasons.append(
            f"needs {program.name}: run `{program.install}` in the checkout, "
            f"or put `{program.name}` on PATH"
        )
    elif found is None:
        reasons.append(_not_found(program.name, program.install))
    home = java_home(environ) if "java" in program.needs else None
    for needed in program.needs:
        present = home is not None if needed == "java" else shutil.which(needed, path=path)
        if not present:
            reasons.append(_not_found(needed, NEEDED_PROGRAMS[needed]))
    environment = {"JAVA_HOME": str(home), "JAVA_OPTS": JAVA_OPTS} if home else {}
    return Interpreter(
        kind,
        (found or program.name, *program.options),
        missing=tuple(reasons),
        environment=environment,
    )


def runtime_interpreters(
    runtime: ScriptRuntime, environ: Mapping[str, str] | None = None
) -> list[Interpreter]:
    """Return the interpreter of every job type that `runtime`'s worker runs."""
    return [
        resolve(kind.job_type, environ) for kind in SCRIPT_KINDS.values() if kind.runtime is runtime
    ]


def report_unavailable(
    runtime: ScriptRuntime, environ: Mapping[str, str] | None = None, *, none_left: str
) -> bool:
    """Warn about each of `runtime`'s job types this machine cannot run; return whether
    any can. When none can, one line says `none_left` for the runtime, and why."""
    interpreters = runtime_interpreters(runtime, environ)
    missing = {str(i.kind.job_type): i.missing for i in interpreters if i.missing}
    if len(missing) == len(interpreters):
        reasons = dict.fromkeys(reason for each in missing.values() for reason in each)
        log.warning(
            f"{runtime} {none_left}: " + "; ".join(reasons),
            action="script.runtime_missing",
            runtime=str(runtime),
        )
        return False
    for job_type, reason in missing.items():
        log.warning(
            f"{job_type} scripts will not run: " + "; ".join(reason),
            action="script.interpreter_missing",
            runtime=str(runtime),
            job_type=job_type,
        )
    return True
