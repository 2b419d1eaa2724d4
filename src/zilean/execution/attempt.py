"""One attempt of an HTTP job: the queue job's payload in, one recorded outcome out.

The hot path is two statements around the call (see `recording.py`):
1. read the row, its gate, its variables, and refresh the member's overlap lock;
2. send the request, bounded by `exec_timeout_ms`;
3. record the attempt, its stats and counters, and either queue what follows (the next
   loop iteration, or the retry) or end the run (release the lock, complete a one-off).

Guarantees: Procrastinate sees every attempt that reached the database as finished, since
loop and retry are fresh queue inserts made here; a failed recording never changes the
decision, and a second transaction still queues the continuation or releases the lock.
Only a first statement that cannot reach the database raises, so Procrastinate re-runs
the queue job (nothing was sent yet). Non-guarantee: a worker killed mid-attempt leaves
its lock and its queue job in `doing` until core's stalled-attempt reaper
(`reaper.py`) records it as lost and retries or ends the run.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import procrastinate
import psycopg
import psycopg_pool
import structlog
from procrastinate import JobContext
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.errors import DatabaseUnavailable
from zilean.execution.callback import Callbacks, FailureReport
from zilean.execution.enqueue import ATTEMPT_TASK, AttemptArgs, Trigger, enqueue_attempts
from zilean.execution.hot_path import HotConnections
from zilean.execution.loop import DEFAULT_LOOP_MAX_ITERATIONS, MAX_ITERATIONS_MESSAGE, decide_loop
from zilean.execution.queues import queue_for
from zilean.execution.recording import (
    AttemptRecord,
    AttemptState,
    Continuation,
    Ending,
    LoadedJob,
    end_run,
    load_attempt,
    one_off_completion,
    record_attempt_hot,
)
from zilean.execution.retry import coalesced_budget, decide_retry
from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.http.call import CallOutcome, last_call, perform, status_error
from zilean.jobkinds.http.request import HttpRequestSpec, build_request, open_auth_secret
from zilean.jobkinds.http.template import references
from zilean.jobkinds.redaction import redact
from zilean.registry.kinds import JobType
from zilean.registry.variables import secret_context

log = structlog.get_logger(__name__)

# When the first statement cannot reach the database, Procrastinate re-runs the queue job
# (nothing was sent yet) after 4, 8, 16 and 32 seconds, then gives up.
DATABASE_RETRY = procrastinate.RetryStrategy(
    max_attempts=5, exponential_wait=2, retry_exceptions={DatabaseUnavailable}
)
# The longest exec_timeout_ms (30 min) plus 5 minutes: the last resort for an attempt that
# somehow outlives its own timeout.
ATTEMPT_SAFETY_NET = 35 * 60.0  # seconds

# Reasons `decide_retry` gives for a failure that must not be retried by design.
_CANCELLING_REASONS = frozenset({"permanent", "retry_disabled"})


@dataclass(frozen=True)
class QueuedAttempt:
    """What the queue knows about the attempt: its queue job id and when it was due."""

    queue_job_id: int | None
    scheduled_at: datetime | None


@dataclass(frozen=True)
class CallResult:
    """The call's outcome: a response, an error, or both (a non-2xx response)."""

    spec: HttpRequestSpec | None
    outcome: CallOutcome | None
    error: CallError | None
    duration_ms: int | None

    @property
    def secrets(self) -> frozenset[str]:
        return self.spec.secrets if self.spec is not None else frozenset()


@dataclass(frozen=True)
class Plan:
    """What follows the attempt: its state, and the next queue job or the end of the run."""

    state: AttemptState
    continuation: AttemptArgs | None = None
    delay_ms: int = 0

    @property
    def terminal(self) -> bool:
        return self.continuation is None


class AttemptRunner:
    """Runs attempts for one worker: its database connections, one HTTP client, one key.

    The two statements of every attempt go through `hot` (the worker's own psycopg pool,
    `execution/hot_path.py`); `engine` serves only the rare paths (a recording that
    failed, a cancelled attempt). Call `close` when done.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        client: httpx.AsyncClient,
        box: SecretBox,
        *,
        default_failure_url: str | None = None,
        hot_pool_size: int = 10,
    ) -> None:
        self._engine = engine
        database_url = engine.url.render_as_string(hide_password=False)
        self.hot = HotConnections(database_url, max_size=hot_pool_size)
        self._client = client
        self._box = box
        self.callbacks = Callbacks(client, default_failure_url)

    async def run(self, queued: QueuedAttempt, args: AttemptArgs) -> AttemptState | None:
        """Run one attempt to its recorded end; return its state, or None when skipped.

        A job that is gone, disabled or gated is skipped: nothing is sent or recorded, and
        the member's lock was already released by the first statement.
        """
        bound = log.bind(job_id=args.job_id, pool_index=args.pool_index, attempt=args.attempt)

        try:
            loaded = await load_attempt(self.hot, args, queued.queue_job_id)
        except (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout) as exc:
            raise DatabaseUnavailable("the attempt could not read its job") from exc
        if loaded is None or not loaded.runnable:
            bound.info("attempt skipped", action="attempt.skipped", reason=_skip_reason(loaded))
            return None

        call = await self._call(loaded, args)
        plan = self._decide(loaded, args, call)
        error = None if call.error is None else redact(call.error.message, call.secrets)
        record = AttemptRecord(
            args=args,
            queue_job_id=queued.queue_job_id,
            state=plan.state,
            scheduled_at=queued.scheduled_at or loaded.deferred_at,
            attempted_at=loaded.now,
            duration_ms=call.duration_ms,
            error=error,
            last_call=self._last_call(call),
        )
        ending = Ending(
            release=plan.terminal,
            one_off=one_off_completion(loaded.row, args.trigger) if plan.terminal else None,
        )
        await self._record(record, plan, ending, str(loaded.row["job_type"]))
        bound.info(
            "attempt finished",
            action=f"attempt.{plan.state}",
            loop_iteration=args.loop_iteration,
            duration_ms=call.duration_ms,
            status_code=self._status_code(call),
            next="end" if plan.terminal else "continue",
            delay_ms=plan.delay_ms,
        )
        if plan.terminal and plan.state is not AttemptState.SUCCEEDED:
            self._report_failure(loaded, args, call, error)
        return plan.state

    async def close(self) -> None:
        await self.hot.close()

    async def abandon(self, args: AttemptArgs) -> None:
        """Release the member's lock of an attempt that was cancelled mid-flight."""
        try:
            async with self._engine.begin() as conn:
                await end_run(
                    conn,
                    uuid.UUID(args.job_id),
                    args.pool_index,
                    Ending(release=True, one_off=None),
                )
        except SQLAlchemyError:
            log.exception("could not release an abandoned attempt's lock", job_id=args.job_id)

    async def _call(self, loaded: LoadedJob, args: AttemptArgs) -> CallResult:
        row = loaded.row
        spec: HttpRequestSpec | None = None
        started = time.monotonic()
        try:
            if row["job_type"] != JobType.HTTP:
                raise PermanentCallError(f"job type {row['job_type']!r} is not run by this worker")
            auth_secret = open_auth_secret(row, self._box)
            variables, secret_values = self._open_variables(loaded, auth_secret)
            hops = args.webhook_hops if args.trigger == Trigger.WEBHOOK else None
            spec = build_request(
                row,
                variables=variables,
                secret_values=secret_values,
                auth_secret=auth_secret,
                pool_index=args.pool_index,
                webhook_hops=hops,
            )
            outcome = await perform(self._client, spec, timeout_ms=int(row["exec_timeout_ms"]))
        except CallError as exc:
            return CallResult(spec, None, exc, _elapsed_ms(started) if spec is not None else None)
        except Exception as exc:  # a bug must still end as a recorded, retryable failure
            log.exception("attempt crashed", action="attempt.crashed", job_id=args.job_id)
            failure = CallError(
                f"the worker failed while running the attempt ({type(exc).__name__})"
            )
            return CallResult(
                spec, None, failure, _elapsed_ms(started) if spec is not None else None
            )
        return CallResult(spec, outcome, status_error(spec, outcome), outcome.duration_ms)

    def _open_variables(
        self, loaded: LoadedJob, auth_secret: str | None
    ) -> tuple[dict[str, str], list[str]]:
        """Return the plaintext of every variable the job references, and the secret ones.

        Raise `PermanentCallError` for a referenced secret the current key cannot open.
        """
        row = loaded.row
        texts = [
            row["url"] or "",
            row["body"] or "",
            json.dumps(row["query_params"]),
            json.dumps(row["headers"]),
            json.dumps(row["auth_config"]),
            auth_secret or "",
        ]
        wanted = set().union(*(references(text) for text in texts))
        variables: dict[str, str] = {}
        secret_values: list[str] = []
        for variable in loaded.variables:
            if variable.name not in wanted:
                continue
            value = variable.value
            if variable.is_secret:
                value = ""  # an empty secret is stored as no ciphertext
                if variable.sealed is not None:
                    try:
                        value = self._box.open(variable.sealed, secret_context(variable.id))
                    except SecretUnreadable:
                        raise PermanentCallError(
                            f"the secret global variable {variable.name} cannot be decrypted "
                            "with the current key; enter it again"
                        ) from None
                secret_values.append(value)
            variables[variable.name] = value
        return variables, secret_values

    def _decide(self, loaded: LoadedJob, args: AttemptArgs, call: CallResult) -> Plan:
        row = loaded.row
        if call.outcome is not None and call.error is None:
            loop = decide_loop(settings=row, body=call.outcome.body, iteration=args.loop_iteration)
            if loop.continue_:
                budget = coalesced_budget(row["retry_max_attempts"], row["retry_enabled"])
                following = replace(
                    args, loop_iteration=args.loop_iteration + 1, attempt=1, max_attempts=budget
                )
                return Plan(AttemptState.SUCCEEDED, following, loop.delay_ms)
            if loop.reason == "max_iterations":
                cap = row["loop_max_iterations"]
                log.error(
                    MAX_ITERATIONS_MESSAGE,
                    action="attempt.loop_max_iterations",
                    job_id=args.job_id,
                    name=row["name"],
                    pool_index=args.pool_index,
                    cap=cap if cap > 0 else DEFAULT_LOOP_MAX_ITERATIONS,
                )
            return Plan(AttemptState.SUCCEEDED)
        assert call.error is not None
        retry = decide_retry(
            settings=row,
            attempt=args.attempt,
            max_attempts=args.max_attempts,
            permanent=call.error.permanent,
            status_code=call.error.status_code,
            retry_after=call.error.retry_after,
            now=datetime.now(UTC),
        )
        if retry.retry:
            return Plan(
                AttemptState.FAILED, replace(args, attempt=args.attempt + 1), retry.delay_ms
            )
        cancelled = retry.reason in _CANCELLING_REASONS
        return Plan(AttemptState.CANCELLED if cancelled else AttemptState.FAILED)

    async def _record(
        self, record: AttemptRecord, plan: Plan, ending: Ending, job_type: str
    ) -> None:
        """Record the attempt and queue what follows; never raise.

        When the recording fails, a second transaction still queues the continuation or
        ends the run, so a database hiccup costs history, not the job's next run.
        """

        continuation = None
        if plan.continuation is not None:
            continuation = Continuation(queue_for(job_type), plan.continuation, plan.delay_ms)

        try:
            await record_attempt_hot(self.hot, record, ending, continuation)
            return
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            log.error(
                "recording the attempt failed",
                action="attempt.record_failed",
                job_id=record.args.job_id,
                error=type(exc).__name__,
            )
        try:
            async with self._engine.begin() as conn:
                if plan.continuation is None:
                    await end_run(conn, record.job_id, record.args.pool_index, ending)
                else:
                    await self._queue(conn, plan, job_type, datetime.now(UTC))
        except SQLAlchemyError as exc:
            log.error(
                "the run could not be continued or ended; its lock waits for the stale timeout",
                action="attempt.salvage_failed",
                job_id=record.args.job_id,
                error=type(exc).__name__,
            )

    @staticmethod
    async def _queue(conn: AsyncConnection, plan: Plan, job_type: str, now: datetime) -> None:
        assert plan.continuation is not None
        await enqueue_attempts(
            conn,
            job_id=uuid.UUID(plan.continuation.job_id),
            job_type=job_type,
            members=[plan.continuation],
            scheduled_at=now + timedelta(milliseconds=plan.delay_ms),
        )

    @staticmethod
    def _last_call(call: CallResult) -> dict[str, Any] | None:
        if call.spec is None:
            return None
        result: CallOutcome | CallError
        if call.outcome is not None:
            result = call.outcome
        else:
            assert call.error is not None
            result = call.error
        return last_call(call.spec, result, call.duration_ms or 0)

    @staticmethod
    def _status_code(call: CallResult) -> int | None:
        if call.outcome is not None:
            return call.outcome.status_code
        return call.error.status_code if call.error is not None else None

    def _report_failure(
        self, loaded: LoadedJob, args: AttemptArgs, call: CallResult, error: str | None
    ) -> None:
        url = self.callbacks.url_for(loaded.row["on_failure_url"])
        if url is None:
            return
        report = FailureReport(
            job_id=args.job_id,
            name=str(loaded.row["name"]),
            attempts=args.attempt,
            last_error=error,
            status_code=self._status_code(call),
        )
        self.callbacks.send(url, report)


def _skip_reason(loaded: LoadedJob | None) -> str:
    if loaded is None:
        return "job deleted"
    return "job disabled" if not loaded.row["enabled"] else "group disabled"


def _elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def register_attempt_task(app: procrastinate.App, runner: AttemptRunner) -> None:
    """Register the attempt task on `app`; every attempt it receives goes to `runner`."""

    @app.task(name=ATTEMPT_TASK, pass_context=True, retry=DATABASE_RETRY)
    async def run_attempt(context: JobContext, /, **args: Any) -> None:
        job = context.job
        attempt = AttemptArgs.from_args(args)
        await run_with_safety_net(
            runner.run(QueuedAttempt(job.id, job.scheduled_at), attempt),
            ATTEMPT_SAFETY_NET,
            on_abandon=lambda: runner.abandon(attempt),
        )


async def run_with_safety_net(
    attempt: Coroutine[Any, Any, object],
    seconds: float,
    *,
    on_abandon: Callable[[], Awaitable[None]],
) -> None:
    """Run an attempt, but never longer than `seconds`: past that it is cancelled and
    abandoned (its member's lock released), and AttemptAbandoned is raised so the queue job
    ends as failed. Only an attempt stuck outside its own `exec_timeout_ms` gets here."""
    try:
        async with asyncio.timeout(seconds):
            await attempt
    except TimeoutError:
        log.error("attempt outlived the safety net; abandoned", action="attempt.abandoned")
        await on_abandon()
        raise AttemptAbandoned() from None


class AttemptAbandoned(Exception):
    """The attempt outlived the safety net and was cancelled."""
