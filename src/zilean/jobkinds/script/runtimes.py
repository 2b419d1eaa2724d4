"""Which interpreter runs each script job type, and whether this machine has it.

`SCRIPT_KINDS` is plain data, one frozen entry per script job type: the program and its
fixed options (the runtime, queue and file extension are the job kind's, in
`jobkinds/definitions.py`). What depends on the machine (is the program on PATH, where
Java lives) is answered by `resolve`, which `zilean up`, the script worker's start-up
report and the process runner share, so the three never disagree about what "installed"
means.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from zilean.config import ScriptRuntime
from zilean.jobkinds.definitions import JOB_KINDS, JobKind
from zilean.registry.kinds import JobType

log = structlog.get_logger(__name__)

# The checkout's pinned tsx (`npm ci --prefix runtimes/node`); absent in an installed
# package, where `tsx` on PATH is used instead.
NODE_RUNTIME_DIR = Path(__file__).resolve().parents[4] / "runtimes" / "node"
PINNED_TSX = NODE_RUNTIME_DIR / "node_modules" / ".bin" / "tsx"
INSTALL_TSX = "npm ci --prefix runtimes/node --ignore-scripts"
# Groovy's own switch for Grape: with it, `@Grab` resolves nothing, so a grabbed class
# fails to compile ("unable to resolve class"). Given on the command line, it wins over
# any JAVA_OPTS. It is not a boundary: a script may still load code at run time.
GROOVY_NO_GRAPE = "-Dgroovy.grape.enable=false"
# Up to five JVMs run at once per worker (SCRIPT_WORKER_CONCURRENCY), each sizing its heap
# from the memory limit: 15% each keeps five under the limit with room for the rest of
# each JVM. The serial collector starts no GC threads, which suits short scripts.
GROOVY_JAVA_OPTS = "-XX:MaxRAMPercentage=15 -XX:+UseSerialGC"
# How to add a program that an interpreter needs besides its own, on Debian.
NEEDED_INSTALL = {"node": "apt-get install nodejs", "java": "apt-get install default-jre-headless"}


@dataclass(frozen=True)
class ScriptKind:
    """What running one job type's script takes, independent of the machine. Its
    runtime, queue, file extension and least timeout are the job kind's
    (`jobkinds/definitions.py`)."""

    job_type: JobType
    program: str  # looked up on PATH; typescript prefers the pinned tsx
    options: tuple[str, ...] = ()  # between the program and the script file
    needs: tuple[str, ...] = ()  # other programs that must be on PATH
    install: str = ""  # how to add the program on Debian

    @property
    def definition(self) -> JobKind:
        return JOB_KINDS[self.job_type]

    @property
    def runtime(self) -> ScriptRuntime | None:
        return self.definition.runtime

    @property
    def extension(self) -> str:
        return self.definition.extension

    @property
    def min_exec_timeout_ms(self) -> int:
        return self.definition.min_exec_timeout_ms


SCRIPT_KINDS: dict[JobType, ScriptKind] = {
    kind.job_type: kind
    for kind in (
        ScriptKind(
            JobType.BASH, "bash",
            install="apt-get install bash coreutils",
        ),
        ScriptKind(
            JobType.JAVASCRIPT, "node",
            install="apt-get install nodejs",
        ),
        ScriptKind(
            JobType.TYPESCRIPT, "tsx", needs=("node",),
            install=INSTALL_TSX,
        ),
        ScriptKind(
            JobType.GROOVY, "groovy",
            options=(GROOVY_NO_GRAPE,), needs=("java",),
            install="apt-get install --no-install-recommends groovy",
        ),
        ScriptKind(
            # -I: ignore PYTHON* variables and the user's site-packages, and keep the
            # script's directory (the shared scratch) off sys.path.
            JobType.PYTHON, "python3", options=("-I",),
            install="apt-get install python3",
        ),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Interpreter:
    """How this machine runs one job type's scripts, or why it cannot."""

    kind: ScriptKind
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


def _program(kind: ScriptKind, path: str | None) -> str | None:
    """Return the argv[0] for `kind`, or None when it is not installed."""
    if kind.job_type is JobType.TYPESCRIPT and os.access(PINNED_TSX, os.X_OK):
        return str(PINNED_TSX)
    return kind.program if shutil.which(kind.program, path=path) else None


def _not_found(program: str, install: str) -> str:
    return f"`{program}` not found on PATH (on Debian: {install})"


def resolve(job_type: JobType, environ: Mapping[str, str] | None = None) -> Interpreter:
    """Return how `environ`'s PATH (default: this process's) runs `job_type` scripts.

    When something is missing, `missing` names each missing part and how to add it.
    """
    environ = os.environ if environ is None else environ
    kind = SCRIPT_KINDS[job_type]
    path = environ.get("PATH")
    program = _program(kind, path)
    reasons: list[str] = []
    if program is None and job_type is JobType.TYPESCRIPT:
        reasons.append(f"needs tsx: run `{INSTALL_TSX}` in the checkout, or put `tsx` on PATH")
    elif program is None:
        reasons.append(_not_found(kind.program, kind.install))
    home = java_home(environ) if "java" in kind.needs else None
    for needed in kind.needs:
        found = home is not None if needed == "java" else shutil.which(needed, path=path)
        if not found:
            reasons.append(_not_found(needed, NEEDED_INSTALL[needed]))
    environment = {"JAVA_HOME": str(home), "JAVA_OPTS": GROOVY_JAVA_OPTS} if home else {}
    return Interpreter(
        kind,
        (program or kind.program, *kind.options),
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
