"""A script job's call: its environment, its volumes, one process, what is recorded.

The script body and `script_args` are run exactly as written (`{{name}}` is not
substituted: a variable edit must never change the code that runs); variables reach the
script through its environment instead. A secret variable is injected only when it
allows scripts and the job names it, opened with the script key: a script worker never
holds the master key. Whatever was injected as a secret is `REDACTED` in every recorded
text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from zilean.crypto.contexts import script_context
from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.execution.payload import AttemptArgs
from zilean.execution.recording import LoadedJob, StoredVariable
from zilean.execution.webhook_context import script_stdin, script_variables
from zilean.jobkinds.caller import Caller, CallResult
from zilean.jobkinds.definitions import kind_of
from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.redaction import Secrets
from zilean.jobkinds.script.environment import script_environment
from zilean.jobkinds.script.process import ScriptOutcome, ScriptRun, run_script
from zilean.jobkinds.script.runtimes import Interpreter
from zilean.jobkinds.script.volumes import declared_volumes
from zilean.registry.kinds import JobType

log = structlog.get_logger(__name__)

SNIPPET_CHARS = 2000  # of stdout and stderr in `last_call`: stack traces run long

NO_PROCESS: dict[str, Any] = {
    "interpreter": None,
    "script_args": None,
    "exit_code": None,
    "stdout_snippet": None,
    "stderr_snippet": None,
    "stdout_length": None,
    "stderr_length": None,
}


@dataclass(frozen=True)
class ScriptHost:
    """What the worker's start-up found, the same for every run."""

    path: str  # the worker's own PATH, the one variable of its environment a script gets
    timezone: str | None  # the worker's TZ, when set
    volumes_root: Path | None  # None unless SCRIPT_VOLUMES_ROOT passed the start-up probe
    sandbox: bool  # SCRIPT_SANDBOX_ENABLED=1 and the bwrap self-test passed
    work_root: Path | None = None  # where per-run directories go (the temp dir by default)


_unconfined_warned = False


def _warn_unconfined_once() -> None:
    # One warning per process, not per job or per run: the docs say what it means.
    global _unconfined_warned
    _unconfined_warned = True


class ScriptCaller:
    """Runs one job type's scripts on this worker."""

    no_call: Mapping[str, Any] = NO_PROCESS

    def __init__(self, interpreter: Interpreter, host: ScriptHost, box: SecretBox) -> None:
        self._interpreter = interpreter
        self._host = host
        self._box = box  # the script key's box

    def timeout_ms(self, row: Mapping[str, Any]) -> int:
        return int(row["exec_timeout_ms"])

    async def call(self, loaded: LoadedJob, args: AttemptArgs) -> CallResult:
        row = loaded.row
        try:
            if not self._interpreter.available:
                raise PermanentCallError(
                    f"{row['job_type']} scripts cannot run on this worker: "
                    + "; ".join(self._interpreter.missing)
                )
            volumes = declared_volumes(
                row["capabilities"], loaded.volume_catalog, self._host.volumes_root
            )
            variables, secrets = self._variables(row, loaded.variables)
        except CallError as exc:
            return CallResult(exc, None, NO_PROCESS)
        if volumes and not self._host.sandbox and not _unconfined_warned:
            _warn_unconfined_once()
            log.warning(
                "a job declaring script volumes runs without the sandbox: every script on "
                "this worker can reach every volume, and ro is advisory",
                action="script.volumes_unenforced",
                job_id=str(row["id"]),
            )
        kind = kind_of(str(row["job_type"]))
        assert kind is not None  # the runner routes only known kinds here
        run = ScriptRun(
            command=self._interpreter.argv,
            extension=kind.extension,
            body=str(row["script_body"]),
            args=tuple(row["script_args"]),
            env=script_environment(
                path=self._host.path,
                job_name=str(row["name"]),
                pool_index=args.pool_index or 0,
                loop_iteration=args.loop_iteration,
                timezone=self._host.timezone,
                volumes={mount.name: mount.host_path for mount in volumes},
                variables=variables,
                runtime=self._interpreter.environment,
                webhook=script_variables(args),
            ),
            stdin=script_stdin(args),
            timeout_ms=self.timeout_ms(row),
            volumes=tuple(volumes),
            sandbox=self._host.sandbox,
            work_root=self._host.work_root,
        )
        try:
            outcome = await run_script(run)
        except CallError as exc:  # the interpreter could not be started
            return CallResult(CallError(secrets.redact(exc.message), permanent=True), None, {
                **NO_PROCESS, "interpreter": run.command[0], "script_args": list(run.args)
            })  # fmt: skip
        return _result(run, outcome, secrets)

    def _variables(
        self, row: Mapping[str, Any], loaded: Sequence[StoredVariable]
    ) -> tuple[list[tuple[str, str]], Secrets]:
        """(name, value) of every plain variable and every opted-in secret, and the
        secrets to redact. The read already left out secrets not opted in on both sides."""
        wanted = set(row["script_secret_vars"])
        variables: list[tuple[str, str]] = []
        injected: list[str] = []
        for variable in loaded:
            if not variable.is_secret:
                variables.append((variable.name, variable.value))
                continue
            if variable.name not in wanted:
                continue
            value = self._open(variable)
            variables.append((variable.name, value))
            injected.append(value)
        return variables, Secrets(own=injected)

    def _open(self, variable: StoredVariable) -> str:
        if variable.script_sealed is None:
            return ""  # an empty secret, or one saved before it allowed scripts
        try:
            return self._box.open(variable.script_sealed, script_context(variable.id))
        except SecretUnreadable:
            raise PermanentCallError(
                f"the secret global variable {variable.name} cannot be decrypted with this "
                "worker's SCRIPT_SECRETS_KEY; check the key, or enter the value again"
            ) from None


def _text(data: bytes, secrets: Secrets) -> str:
    return secrets.redact(data.decode("utf-8", errors="replace"))[:SNIPPET_CHARS]


def _result(run: ScriptRun, outcome: ScriptOutcome, secrets: Secrets) -> CallResult:
    stdout, stderr = _text(outcome.stdout, secrets), _text(outcome.stderr, secrets)
    fields = {
        "interpreter": run.command[0],
        "script_args": [secrets.redact(arg) for arg in run.args],
        "exit_code": outcome.exit_code,
        "stdout_snippet": stdout,
        "stderr_snippet": stderr,
        "stdout_length": outcome.stdout_length,
        "stderr_length": outcome.stderr_length,
    }
    # A timeout first: the kill shows as a signal's exit status.
    if outcome.timed_out:
        error: CallError | None = CallError(f"script timed out: after {run.timeout_ms} ms")
    elif outcome.exit_code is None:
        error = CallError("script did not run to completion (killed)")
    elif outcome.exit_code != 0:
        error = CallError(f"script exited {outcome.exit_code}: {stderr}")
    else:
        error = None
    return CallResult(error, outcome.duration_ms, fields, loop_signal=outcome.stdout)


def script_callers(
    interpreters: Sequence[Interpreter], host: ScriptHost, box: SecretBox
) -> dict[JobType, Caller]:
    """The callers of one script worker, one per job type its runtime runs. A job type
    whose interpreter is missing here still gets one: its attempts are cancelled, saying
    what to install, rather than left waiting for a worker that will never run them."""
    return {
        interpreter.kind.job_type: ScriptCaller(interpreter, host, box)
        for interpreter in interpreters
    }
