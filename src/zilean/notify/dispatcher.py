"""Core's notifier: turns outbox events and alarm evaluations into deliveries.

Every core drains the outbox (`FOR UPDATE SKIP LOCKED`, so replicas share the work); only
the leading core evaluates alarms, once per `ALARM_INTERVAL`. Deliveries run as
background tasks, each bounded by `DELIVERY_TIMEOUT`, at most `MAX_DELIVERIES` at once:
a slow target holds one of those slots, never a worker's, and never the outbox.

Alert policy per job (`job_notify_state`): the Nth consecutive failed run notifies
(`notify_after_failures`); later failures of the streak notify each time, or at most
once per `notify_reminder_minutes` when that is set; the first success after a notified
streak is a recovery. A pooled job's members that end in one firing are one run here:
their events wait until every member has reported (or `DIGEST_WINDOW` passed) and make
one notice naming the members that failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.loops import wait_for_stop
from zilean.notify.delivery import (
    DELIVERY_TIMEOUT,
    DeliveryFailed,
    Notice,
    post_webhook,
    send_apprise,
    send_email,
)
from zilean.notify.kinds import FAILURE_EVENTS, RUN_END_EVENTS, EventKind, TargetKind, accepts
from zilean.notify.settings import AppriseSettings, SmtpSettings, load_apprise, load_smtp
from zilean.notify.targets import Target, load_targets

log = structlog.get_logger(__name__)

POLL_INTERVAL = 1.0  # seconds between looks at the outbox
ALARM_INTERVAL = 60.0  # seconds between alarm evaluations (leading core only)
DIGEST_WINDOW = 60.0  # seconds a pooled firing's events wait for the other members
MAX_DELIVERIES = 16  # deliveries in flight at once
CLAIM_LIMIT = 500  # outbox rows read per pass

_JOB = """j.name, j.group_name, j.job_type, j.notify_on, j.notify_all_targets, j.notify_targets,
       j.notify_after_failures, j.notify_reminder_minutes"""

CLAIM = text(
    f"""
    SELECT e.id, e.job_id, e.kind, e.pool_index, e.firing, e.fired_members, e.detail,
           e.occurred_at, now() AS now, {_JOB}
      FROM notify_events e JOIN scheduled_jobs j ON j.id = e.job_id
     ORDER BY e.id
     LIMIT :limit
       FOR UPDATE OF e SKIP LOCKED
    """  # noqa: S608 (a constant column list)
)
DELETE_EVENTS = text("DELETE FROM notify_events WHERE id = ANY(:ids)")
STATE = text(
    """
    WITH created AS (
        INSERT INTO job_notify_state (job_id) VALUES (:job_id) ON CONFLICT DO NOTHING
    )
    SELECT consecutive_failures, failure_notified, last_notified_at
      FROM job_notify_state WHERE job_id = :job_id FOR UPDATE
    """
)
SAVE_STATE = text(
    """
    INSERT INTO job_notify_state (job_id, consecutive_failures, failure_notified,
                                  last_notified_at)
    VALUES (:job_id, :failures, :notified, :last)
    ON CONFLICT (job_id) DO UPDATE
       SET consecutive_failures = excluded.consecutive_failures,
           failure_notified = excluded.failure_notified,
           last_notified_at = excluded.last_notified_at
    """
)
# A skip streak ends once no member of the job holds its lock: the next firing runs.
END_SKIP_STREAKS = text(
    """
    UPDATE job_notify_state s SET skipping = false
      FROM scheduled_jobs j
     WHERE s.job_id = j.id AND s.skipping AND j.running_since_by_pool = '{}'::jsonb
    """
)
ALARMS = text(
    f"""
    SELECT a.id, a.job_id, a.metric, a.threshold, a.window_minutes, a.last_state,
           coalesce((
               SELECT sum(CASE WHEN a.metric = 'total' THEN s.total ELSE s.failed END)
                 FROM job_call_stats s
                WHERE s.job_id = a.job_id
                  AND s.bucket_start >= date_trunc('minute', now())
                                        - (a.window_minutes - 1) * interval '1 minute'
           ), 0) AS count,
           now() AS now, {_JOB}
      FROM job_alarms a JOIN scheduled_jobs j ON j.id = a.job_id
     WHERE a.enabled
     ORDER BY a.id
       FOR UPDATE OF a SKIP LOCKED
    """  # noqa: S608 (a constant column list)
)
SET_ALARM_STATE = text(
    "UPDATE job_alarms SET last_state = :state, last_changed_at = now() WHERE id = :id"
)
THRESHOLDS = text(
    """
    SELECT t.service, t.cpu_percent, t.memory_mb, t.target_ids, t.last_state,
           latest.cpu_percent AS cpu, latest.rss_bytes AS rss
      FROM metric_thresholds t
      JOIN LATERAL (
          SELECT cpu_percent, rss_bytes FROM worker_metrics m
           WHERE m.service = t.service ORDER BY m.sampled_at DESC LIMIT 1
      ) latest ON true
     WHERE t.enabled
       FOR UPDATE OF t SKIP LOCKED
    """
)
SET_THRESHOLD_STATE = text(
    "UPDATE metric_thresholds SET last_state = :state, last_changed_at = now() "
    "WHERE service = :service"
)
MEGABYTE = 1024 * 1024


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_payload(job: Any, event: EventKind, occurred_at: datetime) -> dict[str, Any]:
    """The fields every webhook body carries: which job, and when."""
    return {
        "event": str(event),
        "job_id": str(job["job_id"]),
        "job_name": job["name"],
        "group_name": job["group_name"],
        "job_type": job["job_type"],
        "occurred_at": _rfc3339(occurred_at),
    }


@dataclass(frozen=True)
class Delivery:
    """A notice and who may receive it: these target ids (None: every target)."""

    notice: Notice
    target_ids: list[int] | None
    kinds: frozenset[TargetKind] = frozenset(TargetKind)
    filtered: bool = True  # the targets' event filters apply (not for metrics alarms)


@dataclass
class _Group:
    events: list[Any] = field(default_factory=list)

    @property
    def first(self) -> Any:
        return self.events[0]

    def ready(self, now: datetime, window: float) -> bool:
        first = self.first
        if first["kind"] not in RUN_END_EVENTS or not first["firing"]:
            return True
        members = {event["pool_index"] for event in self.events}
        waited = (now - min(event["occurred_at"] for event in self.events)).total_seconds()
        return len(members) >= int(first["fired_members"]) or waited >= window


def _groups(rows: Sequence[Any]) -> list[_Group]:
    groups: dict[tuple[Any, ...], _Group] = {}
    for row in rows:
        if row["kind"] in RUN_END_EVENTS and row["firing"]:
            key: tuple[Any, ...] = (row["job_id"], row["firing"])
        else:
            key = (row["id"],)
        groups.setdefault(key, _Group()).events.append(row)
    return list(groups.values())


def _job_targets(job: Any) -> list[int] | None:
    return None if job["notify_all_targets"] else [int(t) for t in job["notify_targets"]]


def _members(indexes: Sequence[int]) -> str:
    return ", ".join(str(index) for index in sorted(indexes))


class Notifier:
    """Run in core until `stop` is set: deliver outbox events, evaluate alarms."""

    def __init__(
        self,
        engine: AsyncEngine,
        box: SecretBox,
        *,
        leading: Callable[[], bool],
        poll_interval: float = POLL_INTERVAL,
        alarm_interval: float = ALARM_INTERVAL,
        digest_window: float = DIGEST_WINDOW,
        delivery_timeout: float = DELIVERY_TIMEOUT,
        max_deliveries: int = MAX_DELIVERIES,
    ) -> None:
        self._engine = engine
        self._box = box
        self._leading = leading
        self._poll_interval = poll_interval
        self._alarm_interval = alarm_interval
        self._digest_window = digest_window
        self.delivery_timeout = delivery_timeout
        self._slots = asyncio.Semaphore(max_deliveries)
        self._in_flight: set[asyncio.Task[None]] = set()
        self._client: aiohttp.ClientSession | None = None
        self.passes = 0  # outbox passes made, and alarm evaluations (for tests, diagnostics)
        self.evaluations = 0

    @property
    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = aiohttp.ClientSession(headers={"User-Agent": "Zilean"})
        return self._client

    async def run(self, stop: asyncio.Event) -> None:
        next_alarms = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    await self.dispatch_once()
                except Exception:
                    log.exception("notification pass failed", action="notify.pass_failed")
                self.passes += 1
                if self._leading() and time.monotonic() >= next_alarms:
                    next_alarms = time.monotonic() + self._alarm_interval
                    try:
                        await self.evaluate_alarms()
                        await self.evaluate_thresholds()
                    except Exception:
                        log.exception("alarm evaluation failed", action="notify.alarms_failed")
                    self.evaluations += 1
                await wait_for_stop(stop, self._poll_interval)
        finally:
            await self.close()

    async def close(self) -> None:
        for task in self._in_flight:
            task.cancel()
        await self.settle()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def settle(self) -> None:
        """Wait for the deliveries in flight (tests, and a stopping core)."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    # --- the outbox ---------------------------------------------------------------

    async def dispatch_once(self) -> int:
        """Handle every outbox event that is ready; return how many notices went out."""
        async with self._engine.begin() as conn:
            await conn.execute(END_SKIP_STREAKS)
            rows = (await conn.execute(CLAIM, {"limit": CLAIM_LIMIT})).mappings().all()
            if not rows:
                return 0
            now = rows[0]["now"]
            deliveries: list[Delivery] = []
            handled: list[int] = []
            for group in _groups(rows):
                if not group.ready(now, self._digest_window):
                    continue
                handled.extend(event["id"] for event in group.events)
                delivery = await self._handle(conn, group, now)
                if delivery is not None:
                    deliveries.append(delivery)
            await conn.execute(DELETE_EVENTS, {"ids": handled})
            await self._start(conn, deliveries)
        return len(deliveries)

    async def _handle(self, conn: AsyncConnection, group: _Group, now: datetime) -> Delivery | None:
        first = group.first
        kind = EventKind(first["kind"])
        if kind in RUN_END_EVENTS:
            return await self._run_end(conn, group, now)
        detail = first["detail"]
        name = first["name"]
        payload = job_payload(first, kind, first["occurred_at"])
        if kind is EventKind.LOOP_CAPPED:
            payload |= {"loop_iterations": detail.get("iterations"), "loop_cap": detail.get("cap")}
            notice = Notice(
                str(kind),
                f"Zilean: {name} stopped at its loop cap",
                f"{name} stopped looping after {detail.get('iterations')} iterations: "
                f"loop_max_iterations is {detail.get('cap')}.",
                payload,
            )
        else:
            skipped = detail.get("skipped_members", [])
            payload |= {"skipped_members": skipped}
            notice = Notice(
                str(kind),
                f"Zilean: {name} skipped a firing",
                f"{name} skipped a firing: pool member(s) {_members(skipped)} still running "
                "from an earlier one. Further skips are not reported until it catches up.",
                payload,
            )
        return Delivery(notice, _job_targets(first))

    async def _run_end(
        self, conn: AsyncConnection, group: _Group, now: datetime
    ) -> Delivery | None:
        first = group.first
        job_id, name, notify_on = first["job_id"], first["name"], first["notify_on"]
        state = (await conn.execute(STATE, {"job_id": job_id})).mappings().first()
        failures = int(state["consecutive_failures"]) if state else 0
        notified = bool(state["failure_notified"]) if state else False
        last: datetime | None = state["last_notified_at"] if state else None
        failed = [event for event in group.events if event["kind"] in FAILURE_EVENTS]
        pooled = int(first["fired_members"]) > 1
        occurred_at = min(event["occurred_at"] for event in group.events)
        if failed:
            failures += 1
            threshold = int(first["notify_after_failures"])
            reminder = timedelta(minutes=int(first["notify_reminder_minutes"]))
            due = failures == threshold or (
                failures > threshold and (not reminder or last is None or now - last >= reminder)
            )
            send = notify_on in ("failure", "both") and due
            exhausted = all(event["kind"] == EventKind.RETRY_EXHAUSTED for event in failed)
            event = EventKind.RETRY_EXHAUSTED if exhausted else EventKind.FAILURE
            notified = notified or send
            last = now if send else last
            await conn.execute(
                SAVE_STATE,
                {"job_id": job_id, "failures": failures, "notified": notified, "last": last},
            )
            if not send:
                return None
            snippet = str(failed[0]["detail"].get("snippet") or "")
            ended = "ran out of retries" if exhausted else "failed"
            if pooled:
                indexes = [int(e["pool_index"]) for e in failed]
                body = (
                    f"{len(failed)} of {first['fired_members']} pool members of {name} {ended} "
                    f"in one firing (members {_members(indexes)})"
                )
            else:
                attempts = failed[0]["detail"].get("attempts", 1)
                body = f"{name} {ended} after {attempts} attempt(s)"
            if failures > 1:
                body += f"; {failures} consecutive failed runs"
            body += f": {snippet}" if snippet else "."
            payload = job_payload(first, event, occurred_at) | {
                "snippet": snippet,
                "consecutive_failures": failures,
            }
            if pooled:
                payload["pool_members"] = sorted(int(e["pool_index"]) for e in failed)
            return Delivery(
                Notice(str(event), f"Zilean: {name} {ended}", body, payload), _job_targets(first)
            )
        recovered = notified
        send = notify_on in ("success", "both") or (recovered and notify_on == "failure")
        await conn.execute(
            SAVE_STATE,
            {"job_id": job_id, "failures": 0, "notified": False, "last": now if send else last},
        )
        if not send:
            return None
        title = f"Zilean: {name} recovered" if recovered else f"Zilean: {name} succeeded"
        body = f"{name} succeeded" + (" after a notified failure." if recovered else ".")
        payload = job_payload(first, EventKind.SUCCESS, occurred_at) | {"recovered": recovered}
        if pooled:
            payload["pool_members"] = sorted(int(e["pool_index"]) for e in group.events)
        notice = Notice(str(EventKind.SUCCESS), title, body, payload, recovery=recovered)
        return Delivery(notice, _job_targets(first))

    # --- alarms ---------------------------------------------------------------------

    async def evaluate_alarms(self) -> int:
        """One pass over the invocation alarms; return how many changed state."""
        async with self._engine.begin() as conn:
            rows = (await conn.execute(ALARMS)).mappings().all()
            deliveries = []
            for alarm in rows:
                count = int(alarm["count"])
                state = "breached" if count >= int(alarm["threshold"]) else "ok"
                if state == alarm["last_state"]:
                    continue
                await conn.execute(SET_ALARM_STATE, {"state": state, "id": alarm["id"]})
                deliveries.append(Delivery(alarm_notice(alarm, state, count), _job_targets(alarm)))
            await self._start(conn, deliveries)
        return len(deliveries)

    async def evaluate_thresholds(self) -> int:
        """One pass over the metrics alarms; return how many changed state."""
        async with self._engine.begin() as conn:
            rows = (await conn.execute(THRESHOLDS)).mappings().all()
            deliveries = []
            for row in rows:
                cpu, memory_mb = float(row["cpu"]), int(row["rss"]) / MEGABYTE
                over_cpu = row["cpu_percent"] is not None and cpu >= row["cpu_percent"]
                over_memory = row["memory_mb"] is not None and memory_mb >= row["memory_mb"]
                state = "breached" if over_cpu or over_memory else "ok"
                if state == row["last_state"]:
                    continue
                await conn.execute(SET_THRESHOLD_STATE, {"state": state, "service": row["service"]})
                notice = threshold_notice(row, state, cpu, memory_mb)
                deliveries.append(
                    Delivery(
                        notice,
                        [int(t) for t in row["target_ids"]],
                        kinds=frozenset({TargetKind.APPRISE, TargetKind.EMAIL}),
                        filtered=False,
                    )
                )
            await self._start(conn, deliveries)
        return len(deliveries)

    # --- delivery ---------------------------------------------------------------------

    async def _start(self, conn: AsyncConnection, deliveries: Sequence[Delivery]) -> None:
        """Open the targets and settings these deliveries need, then send in background."""
        if not deliveries:
            return
        try:
            targets = await load_targets(conn, self._box)
            smtp = await load_smtp(conn, self._box)
        except SecretUnreadable:
            log.error(
                "notification secrets cannot be opened with this key; nothing delivered",
                action="notify.secrets_unreadable",
            )
            return
        apprise = await load_apprise(conn)
        for delivery in deliveries:
            chosen = set(delivery.target_ids) if delivery.target_ids is not None else None
            for target in targets:
                if chosen is not None and target.id not in chosen:
                    continue
                if target.kind not in delivery.kinds:
                    continue
                notice = delivery.notice
                if delivery.filtered and not accepts(
                    target.events, EventKind(notice.event), recovery=notice.recovery
                ):
                    continue
                self.send(target, notice, smtp=smtp, apprise=apprise)

    def send(
        self, target: Target, notice: Notice, *, smtp: SmtpSettings, apprise: AppriseSettings
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(self._send(target, notice, smtp, apprise))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return task

    async def _send(
        self, target: Target, notice: Notice, smtp: SmtpSettings, apprise: AppriseSettings
    ) -> None:
        async with self._slots:
            try:
                await deliver(
                    self.client, target, notice, smtp=smtp, apprise=apprise,
                    within=self.delivery_timeout,
                )  # fmt: skip
            except DeliveryFailed as exc:
                log.warning(
                    "notification not delivered",
                    action="notify.failed",
                    target_id=target.id,
                    target_kind=str(target.kind),
                    notify_event=notice.event,
                    error=str(exc),
                )
                return
            except Exception:
                log.exception("notification delivery crashed", action="notify.crashed")
                return
        log.info(
            "notification delivered",
            action="notify.delivered",
            target_id=target.id,
            target_kind=str(target.kind),
            notify_event=notice.event,
        )


async def deliver(
    client: aiohttp.ClientSession,
    target: Target,
    notice: Notice,
    *,
    smtp: SmtpSettings,
    apprise: AppriseSettings,
    within: float = DELIVERY_TIMEOUT,
) -> None:
    """Send `notice` to `target` once; raise DeliveryFailed when it does not arrive."""
    if target.kind is TargetKind.WEBHOOK:
        await post_webhook(client, target.address, target.signing_secret, notice, within=within)
    elif target.kind is TargetKind.EMAIL:
        if not smtp.configured:
            raise DeliveryFailed("SMTP is not configured")
        await send_email(smtp, target.address, notice.title, notice.body, within=within)
    else:
        await send_apprise(client, apprise, target.address, notice, within=within)


def alarm_notice(alarm: Any, state: str, count: int) -> Notice:
    metric = alarm["metric"]
    word = "failed invocations" if metric == "failed" else "invocations"
    body = (
        f"{alarm['name']} had {count} {word} in the last {alarm['window_minutes']} minutes "
        f"(alarm at >= {alarm['threshold']})."
    )
    title = (
        "Zilean: invocation alarm breached"
        if state == "breached"
        else "Zilean: invocation alarm recovered"
    )
    payload = job_payload(alarm, EventKind.INVOCATION_ALARM, alarm["now"]) | {
        "alarm_state": state,
        "alarm_metric": metric,
        "alarm_count": str(count),
        "alarm_threshold": str(alarm["threshold"]),
        "alarm_window_minutes": str(alarm["window_minutes"]),
    }
    return Notice(str(EventKind.INVOCATION_ALARM), title, body, payload)


def threshold_notice(row: Any, state: str, cpu: float, memory_mb: float) -> Notice:
    service = row["service"]
    parts = []
    if row["cpu_percent"] is not None:
        parts.append(f"CPU {cpu:.2f}% (alarm at >= {row['cpu_percent']:g}%)")
    if row["memory_mb"] is not None:
        parts.append(f"memory {memory_mb:.1f} MB (alarm at >= {row['memory_mb']:g} MB)")
    title = (
        f"Zilean: {service} crossed its metrics alarm"
        if state == "breached"
        else f"Zilean: {service} is back under its metrics alarm"
    )
    payload = {"event": "metrics_alarm", "service": service, "state": state}
    return Notice("metrics_alarm", title, f"{service}: " + ", ".join(parts) + ".", payload)
