"""One attempt of a job of any kind: a queue job in, one recorded outcome out.

The lifecycle is shared by every job kind; only the call differs (a `Caller` per kind:
`jobkinds/http/caller.py`, `jobkinds/script/caller.py`). The hot path is two statements
around the call (`recording.py`):
1. read the row, its gate, its variables and this queue job's history; refresh the
   member's overlap lock and write the start marker;
2. make the call (send the request, run the script), bounded by `exec_timeout_ms`;
3. record the attempt, its stats and counters, and either queue what follows (the next
   loop iteration, or the retry) or end the run (release the lock, complete a one-off).

Guarantees:
- A recorded attempt's call is never made again: a queue job delivered again after its
  attempt was recorded only finishes.
- An attempt that started and was never recorded (its worker died, or could not write)
  is recorded as `LOST_ERROR` when its queue job is delivered again, and the job's retry
  policy decides what follows, as for any failure. Its call may or may not have reached
  the target: delivery is at least once, and the history says so.
- The retry and loop decision never depends on whether recording worked: a recording
  that fails is retried for `RECORD_PATIENCE`, then the queue job is handed back for
  redelivery (which records it lost), so the run always goes on or ends.
- An attempt that cannot read its job is tried again (nothing was sent); after
  `DATABASE_RETRIES` deliveries its run is given up: the lock released, a one-off
  completed.
- Every terminal failure, lost, interrupted, abandoned and given-up attempts included,
  sends the failure callback once, after it is recorded.
- What is recorded (`last_call`, the error) is redacted of every secret global
  variable's value and the request's resolved credentials.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
import structlog

from zilean.errors import DatabaseUnavailable
from zilean.execution.callback import Callbacks, FailureReport
from zilean.execution.loop import DEFAULT_LOOP_MAX_ITERATIONS, MAX_ITERATIONS_MESSAGE, decide_loop
from zilean.execution.payload import AttemptArgs
from zilean.execution.recording import (
    AttemptRecord,
    AttemptState,
    AttemptStatements,
    Continuation,
    Ending,
    LoadedJob,
    Recorded,
    last_call,
    one_off_completion,
)
from zilean.execution.retry import coalesced_budget, decide_retry
from zilean.jobkinds.caller import Caller, CallResult
from zilean.jobkinds.definitions import kind_of, queue_for
from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.notify.kinds import EventKind
from zilean.notify.outbox import Event, Outbox, run_end
from zilean.queue_engine.consumer import Delivery, Handler, RetryLater
from zilean.registry.kinds import JobType

if TYPE_CHECKING:
    import aiohttp

log = structlog.get_logger(__name__)

LOST_ERROR = "worker lost; outcome unknown"
INTERRUPTED_ERROR = "worker stopped before the attempt finished; outcome unknown"
ABANDONED_ERROR = "attempt outlived the worker's safety net and was abandoned; outcome unknown"
# The longest exec_timeout_ms (30 min) plus 5 minutes: the last resort for an attempt that
# somehow outlives its own timeout.
ATTEMPT_SAFETY_NET = 35 * 60.0  # seconds
RECORD_PATIENCE = 60.0  # seconds a failing recording is retried before handing back
RECORD_BACKOFF_MAX = 1.0  # seconds between recording retries, at most
DATABASE_RETRY_MAX = 30.0  # seconds: the longest wait before a load that failed is retried
# Deliveries of a queue job whose attempt could not read its job, before its run is given
# up: waits of 1, 2, 4, 8, 16 s, then 30 s each, about 10 minutes in all, well within the
# hour after which another firing would take the member's lock over.
DATABASE_RETRIES = 25
GIVEN_UP_ERROR = "the attempt could not read its job from the database; its run was given up"
REDELIVER_AFTER = 1.0  # seconds before an unrecorded attempt's queue job comes back

# Reasons `decide_retry` gives for a failure that must not be retried by design.
_CANCELLING_REASONS = frozenset({"permanent", "retry_disabled"})


@dataclass(frozen=True)
class QueuedAttempt:
    """What the queue knows about the attempt: its queue job id and when it was due."""

    queue_job_id: int
    due_at: datetime | None


@dataclass(frozen=True)
class Plan:
    """What follows the attempt: its state, and the next queue job or the end of the run."""

    state: AttemptState
    continuation: AttemptArgs | None = None
    delay_ms: int = 0
    loop_capped: int = 0  # the cap a loop stopped at (`loop_max_iterations`), else 0

    @property
    def terminal(self) -> bool:
        return self.continuation is None


class Successors(Protocol):
    """The queue consumer, as the runner sees it when it runs a loop's next iteration
    itself (`QueueConsumer.claimant`, `QueueConsumer.adopt`)."""

    @property
    def queue(self) -> str: ...

    @property
    def claimant(self) -> uuid.UUID | None: ...

    def adopt(self, delivery: Delivery, *, replacing: int) -> None: ...


class NotRecorded(Exception):
    """The attempt ran but its outcome could not be written within `RECORD_PATIENCE`."""


@dataclass
class _Running:
    """An attempt between its start marker and its recording."""

    queued: QueuedAttempt
    args: AttemptArgs
    loaded: LoadedJob


class AttemptRunner:
    """Runs attempts for one worker: its connections, and a caller per job kind it runs.

    `client` is the HTTP session failure callbacks go out on. Call `close` when done.
    """

    def __init__(
        self,
        database_url: str,
        callers: Mapping[JobType, Caller],
        client: aiohttp.ClientSession,
        *,
        default_failure_url: str | None = None,
        record_patience: float = RECORD_PATIENCE,
    ) -> None:
        self.statements = AttemptStatements(database_url)
        self._callers = dict(callers)
        self._record_patience = record_patience
        self._running: dict[int, _Running] = {}
        self._successors: Successors | None = None
        self._adopted: dict[int, LoadedJob] = {}  # queue job id: what its recording read
        self.callbacks = Callbacks(client, default_failure_url)
        self.outbox = Outbox(self.statements.singles)

    def run_continuations_on(self, successors: Successors) -> None:
        """Let a loop iteration or retry due at once skip the queue: the recording of the
        attempt before claims it for `successors` (the consumer), reads it and marks it
        started in the same statement, and `successors` runs it (docs/engine.md)."""
        self._successors = successors

    async def run(self, queued: QueuedAttempt, args: AttemptArgs) -> AttemptState | None:
        """Run one attempt to its recorded end; return its state, or None when skipped.

        A job that is gone, disabled or gated is skipped: nothing is sent or recorded,
        and the member's lock was already released by the first statement. Raise
        `DatabaseUnavailable` when the job cannot be read (nothing was sent), and
        `NotRecorded` when the outcome could not be written.
        """
        bound = log.bind(job_id=args.job_id, pool_index=args.pool_index, attempt=args.attempt)
        loaded = self._adopted.pop(queued.queue_job_id, None)
        if loaded is None:
            try:
                loaded = await self.statements.load(args, queued.queue_job_id, queued.due_at)
            except psycopg.OperationalError as exc:
                raise DatabaseUnavailable("the attempt could not read its job") from exc
        if loaded is None:
            bound.info("attempt skipped", action="attempt.skipped", reason="job deleted")
            return None
        if loaded.prior is not None and loaded.prior.finished:
            bound.info(
                "queue job delivered again after its attempt was recorded; nothing to do",
                action="attempt.redelivered",
                queue_job_id=queued.queue_job_id,
            )
            return None
        if loaded.prior is AttemptState.RUNNING:
            lost = self._no_call(loaded.row, LOST_ERROR)
            bound.warning(
                "attempt started but was never recorded; recording it as lost",
                action="attempt.lost",
                queue_job_id=queued.queue_job_id,
            )
            return await self._finish(_Running(queued, args, loaded), lost)
        if not loaded.started:
            reason = _skip_reason(loaded) if not loaded.runnable else "running elsewhere"
            bound.info("attempt skipped", action="attempt.skipped", reason=reason)
            return None
        running = self._running[queued.queue_job_id] = _Running(queued, args, loaded)
        try:
            call = await self._call(loaded, args)
            state = await self._finish(running, call)
        except asyncio.CancelledError:
            raise  # left in `_running`: whoever cancelled it records it (`interrupt`)
        except BaseException:
            self._running.pop(queued.queue_job_id, None)
            raise
        self._running.pop(queued.queue_job_id, None)
        return state

    async def interrupt(self, queue_job_ids: list[int], error: str) -> None:
        """Record the running attempts of these queue jobs as failed with `error`.

        For a worker that must stop before they finish (the soft stop ran out, or the
        safety net): each is recorded, and its retry policy applied, as if it had failed
        with an unknown outcome. An attempt that finishes meanwhile keeps its own record.
        """
        for queue_job_id in queue_job_ids:
            self._adopted.pop(queue_job_id, None)  # adopted, never started: lost on re-pick
            running = self._running.pop(queue_job_id, None)
            if running is None:
                continue
            try:
                await self._finish(running, self._no_call(running.loaded.row, error))
            except NotRecorded:
                log.error(
                    "an interrupted attempt could not be recorded; it is recorded as lost "
                    "when its queue job is delivered again",
                    action="attempt.interrupt_unrecorded",
                    queue_job_id=queue_job_id,
                )

    async def give_up(self, queued: QueuedAttempt, args: AttemptArgs) -> bool:
        """End the run of an attempt that could never read its job; False when even
        that cannot be written (the caller tries again later).

        The member's lock is released, a start marker this queue job left (a read whose
        answer was lost) is finished as failed with `GIVEN_UP_ERROR`, a one-off is
        completed and the failure callback is sent. It is not counted as an invocation:
        no call is known to have been made. A few statements, on a path taken only after
        `DATABASE_RETRIES` failed reads.
        """
        statements = self.statements
        try:
            row = await statements.release(args)
            if row is None:
                return True  # the job is gone, and its history with it
            caller = self._caller_of(row)
            record = last_call(
                job_name=str(row["name"]),
                timeout_ms=caller.timeout_ms(row) if caller else int(row["exec_timeout_ms"]),
                duration_ms=None,
                error=GIVEN_UP_ERROR,
                kind_fields=caller.no_call if caller else {},
            )
            await statements.finish_marker(queued.queue_job_id, GIVEN_UP_ERROR, record)
            await statements.complete_one_off(args.job_id, one_off_completion(row, args.trigger))
        except psycopg.OperationalError:
            return False
        log.error(
            "the attempt could not read its job; its run is given up",
            action="attempt.given_up",
            job_id=args.job_id,
            pool_index=args.pool_index,
            attempt=args.attempt,
        )
        self._report_failure(row, args, GIVEN_UP_ERROR, None, attempts=args.attempt)
        if row["notify_on"] != "none":
            self.outbox.add(run_end(args, "failed", GIVEN_UP_ERROR, None))
        return True

    async def close(self) -> None:
        await self.statements.close()

    async def _finish(self, running: _Running, call: CallResult) -> AttemptState:
        """Decide what follows `call`, record it, log it, and send the failure callback."""
        loaded, args = running.loaded, running.args
        plan = self._decide(loaded, args, call)
        error = None if call.error is None else call.error.message
        record = AttemptRecord(
            args=args,
            queue_job_id=running.queued.queue_job_id,
            state=plan.state,
            duration_ms=call.duration_ms,
            error=error,
            last_call=last_call(
                job_name=str(loaded.row["name"]),
                timeout_ms=self._timeout_ms(loaded.row),
                duration_ms=call.duration_ms,
                error=error,
                kind_fields=call.kind_fields,
            ),
        )
        ending = Ending(
            release=plan.terminal,
            one_off=one_off_completion(loaded.row, args.trigger) if plan.terminal else None,
        )
        continuation = None
        if plan.continuation is not None:
            job_type = str(loaded.row["job_type"])
            continuation = Continuation(queue_for(job_type), plan.continuation, plan.delay_ms)
        recorded = await self._record(record, ending, continuation)
        if recorded is not None and recorded.adopted is not None:
            assert self._successors is not None
            assert continuation is not None
            adopted = recorded.adopted
            self._adopted[adopted.queue_job_id] = adopted.loaded
            following = Delivery(
                adopted.queue_job_id, continuation.queue, adopted.loaded.now, adopted.payload, 0
            )
            self._successors.adopt(following, replacing=running.queued.queue_job_id)
        written = None if recorded is None else recorded.at is not None
        log.info(
            "attempt finished",
            action=f"attempt.{plan.state}",
            job_id=args.job_id,
            pool_index=args.pool_index,
            attempt=args.attempt,
            loop_iteration=args.loop_iteration,
            duration_ms=call.duration_ms,
            status_code=call.status_code,
            next="end" if plan.terminal else "continue",
            delay_ms=plan.delay_ms,
        )
        if written is None:
            raise NotRecorded()
        # Not written (but no error): it was recorded already, by `interrupt` or before.
        if written and plan.terminal and plan.state is not AttemptState.SUCCEEDED:
            self._report_failure(loaded.row, args, error, call.status_code, attempts=args.attempt)
        if written and plan.terminal:
            self._notify(loaded.row, args, plan, error, call.status_code)
        return plan.state

    def _notify(
        self,
        row: Mapping[str, Any],
        args: AttemptArgs,
        plan: Plan,
        error: str | None,
        status_code: int | None,
    ) -> None:
        """Leave the run's end in the outbox (core delivers it); a capped loop always."""
        if plan.loop_capped:
            detail = {"iterations": args.loop_iteration + 1, "cap": plan.loop_capped}
            self.outbox.add(Event(EventKind.LOOP_CAPPED, args, detail))
        if row["notify_on"] != "none":
            self.outbox.add(run_end(args, str(plan.state), error, status_code))

    async def _call(self, loaded: LoadedJob, args: AttemptArgs) -> CallResult:
        caller = self._caller_of(loaded.row)
        if caller is None:  # queues are per kind: only a misrouted queue job gets here
            job_type = loaded.row["job_type"]
            error = PermanentCallError(f"job type {job_type!r} is not run by this worker")
            return CallResult(error, None)
        try:
            return await caller.call(loaded, args)
        except Exception as exc:  # a bug must still end as a recorded, retryable failure
            log.exception("attempt crashed", action="attempt.crashed", job_id=args.job_id)
            failure = CallError(
                f"the worker failed while running the attempt ({type(exc).__name__})"
            )
            return CallResult(failure, None, caller.no_call)

    def _caller_of(self, row: Mapping[str, Any]) -> Caller | None:
        kind = kind_of(str(row["job_type"]))
        return None if kind is None else self._callers.get(kind.job_type)

    def _no_call(self, row: Mapping[str, Any], error: str) -> CallResult:
        """An attempt that ends with no call made (or none known): lost, interrupted."""
        caller = self._caller_of(row)
        return CallResult(CallError(error), None, caller.no_call if caller else {})

    def _timeout_ms(self, row: Mapping[str, Any]) -> int:
        caller = self._caller_of(row)
        return caller.timeout_ms(row) if caller else int(row["exec_timeout_ms"])

    def _decide(self, loaded: LoadedJob, args: AttemptArgs, call: CallResult) -> Plan:
        row = loaded.row
        if call.error is None:
            loop = decide_loop(settings=row, body=call.loop_signal, iteration=args.loop_iteration)
            if loop.continue_:
                budget = coalesced_budget(row["retry_max_attempts"], row["retry_enabled"])
                following = replace(
                    args, loop_iteration=args.loop_iteration + 1, attempt=1, max_attempts=budget
                )
                return Plan(AttemptState.SUCCEEDED, following, loop.delay_ms)
            if loop.reason == "max_iterations":
                cap = row["loop_max_iterations"]
                cap = cap if cap > 0 else DEFAULT_LOOP_MAX_ITERATIONS
                log.error(
                    MAX_ITERATIONS_MESSAGE,
                    action="attempt.loop_max_iterations",
                    job_id=args.job_id,
                    name=row["name"],
                    pool_index=args.pool_index,
                    cap=cap,
                )
                return Plan(AttemptState.SUCCEEDED, loop_capped=cap)
            return Plan(AttemptState.SUCCEEDED)
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
                AttemptState.RETRYING, replace(args, attempt=args.attempt + 1), retry.delay_ms
            )
        cancelled = retry.reason in _CANCELLING_REASONS
        return Plan(AttemptState.CANCELLED if cancelled else AttemptState.FAILED)

    async def _record(
        self, record: AttemptRecord, ending: Ending, continuation: Continuation | None
    ) -> Recorded | None:
        """Record the attempt and queue what follows; None when it could not be written.

        A database hiccup is retried for `record_patience`; only then is it given up,
        so that the queue job is delivered again and recorded as lost.
        """
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._record_patience
        wait = 0.1
        # Taken once: a repeat must claim (or find) what its first try claimed. Only for
        # this worker's own queue: a row edited to another job type goes to its workers.
        successors = self._successors
        claimant = None
        if successors is not None and continuation is not None:
            claimant = successors.claimant if continuation.queue == successors.queue else None
        while True:
            try:
                return await self.statements.record(record, ending, continuation, claimant=claimant)
            except psycopg.Error as exc:
                if loop.time() + wait > give_up_at:
                    log.error(
                        "recording the attempt failed; its queue job will be delivered again",
                        action="attempt.record_failed",
                        job_id=record.args.job_id,
                        error=type(exc).__name__,
                    )
                    return None
                log.warning(
                    "recording the attempt failed; retrying",
                    action="attempt.record_retry",
                    job_id=record.args.job_id,
                    error=type(exc).__name__,
                )
            await asyncio.sleep(wait)
            wait = min(wait * 2, RECORD_BACKOFF_MAX)

    def _report_failure(
        self,
        row: Mapping[str, Any],
        args: AttemptArgs,
        error: str | None,
        status_code: int | None,
        *,
        attempts: int,
    ) -> None:
        url = self.callbacks.url_for(row["on_failure_url"])
        if url is None:
            return
        report = FailureReport(
            job_id=args.job_id,
            name=str(row["name"]),
            attempts=attempts,
            last_error=error,
            status_code=status_code,
        )
        self.callbacks.send(url, report)


def _skip_reason(loaded: LoadedJob) -> str:
    return "job disabled" if not loaded.row["enabled"] else "group disabled"


def _elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def attempt_handler(
    runner: AttemptRunner,
    *,
    safety_net: float = ATTEMPT_SAFETY_NET,
    database_retries: int = DATABASE_RETRIES,
) -> Handler:
    """The queue handler for attempts: every delivery goes to `runner`.

    An attempt that cannot read its job is delivered again later (nothing was sent),
    `database_retries` times; after that its run is given up (`AttemptRunner.give_up`),
    as soon as that can be written.
    """

    async def handle(delivery: Delivery) -> None:
        args = AttemptArgs.from_payload(delivery.payload)
        queued = QueuedAttempt(delivery.queue_job_id, delivery.due_at)
        try:
            await run_with_safety_net(
                runner.run(queued, args),
                safety_net,
                on_abandon=lambda: runner.interrupt([delivery.queue_job_id], ABANDONED_ERROR),
            )
        except AttemptAbandoned:
            return  # recorded as failed by `on_abandon`, or lost on redelivery
        except DatabaseUnavailable as exc:
            if delivery.retries < database_retries:
                delay = min(2.0**delivery.retries, DATABASE_RETRY_MAX)
                raise RetryLater(delay, str(exc)) from None
            if not await runner.give_up(queued, args):
                raise RetryLater(DATABASE_RETRY_MAX, str(exc)) from None
        except NotRecorded:
            raise RetryLater(REDELIVER_AFTER, "the attempt's outcome was not recorded") from None

    return handle


async def interrupt_overrun(runner: AttemptRunner, deliveries: list[Delivery]) -> None:
    """The consumer's overrun handler: record every attempt still running as interrupted."""
    await runner.interrupt([delivery.queue_job_id for delivery in deliveries], INTERRUPTED_ERROR)


async def run_with_safety_net(
    attempt: Coroutine[Any, Any, object],
    seconds: float,
    *,
    on_abandon: Callable[[], Awaitable[None]],
) -> None:
    """Run an attempt, but never longer than `seconds`: past that it is cancelled and
    abandoned (`on_abandon` records it), and AttemptAbandoned is raised. Only an attempt
    stuck outside its own `exec_timeout_ms` gets here."""
    try:
        async with asyncio.timeout(seconds):
            await attempt
    except TimeoutError:
        log.error("attempt outlived the safety net; abandoned", action="attempt.abandoned")
        await on_abandon()
        raise AttemptAbandoned() from None


class AttemptAbandoned(Exception):
    """The attempt outlived the safety net and was cancelled."""
