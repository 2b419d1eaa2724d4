"""The job registry service: create, read, replace, delete, enable and disable job rows.

Each write validates through `validation.normalise_job`, records an audit entry in the
same transaction, and never touches server-managed columns (locks, counters). A save that
leaves an enabled one-off not yet queued queues its run in the same transaction.
"""

from __future__ import annotations

import json
import uuid
import zoneinfo
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.auth.principal import Principal
from zilean.auth.tokens import digest, new_token
from zilean.db.tables import scheduled_jobs
from zilean.errors import InvalidInput, NotFound
from zilean.execution.oneoff import queue_one_off
from zilean.registry.fields import JobWrite
from zilean.registry.groups import gated_clause
from zilean.registry.job_patch import patched_job
from zilean.registry.validation import RegistryContext, normalise_job
from zilean.registry.volume_declarations import read_capabilities
from zilean.schedules import ScheduleError, ScheduleType, parse_schedule

WEBHOOK_HINT_LENGTH = 8
WEBHOOK_PATH = "/api/webhooks/{job_id}/{token}"
# Columns never sent to clients.
_PRIVATE = {"auth_secret", "webhook_token_hash"}


def _select() -> Any:
    return select(scheduled_jobs, gated_clause(scheduled_jobs.c.group_name).label("group_gated"))


def next_run_at(row: dict[str, Any], now: datetime, default_timezone: str) -> datetime | None:
    """When the job will next fire on its own, or None (disabled, gated, webhook, fired).

    For an `@every` schedule this is an estimate from now: the scheduler measures it
    from when it added or last fired the entry. A one-off is queued as soon as it is saved
    (`run_at_fired_at`), but until its `run_at` passes that run is still to come.
    """
    if not row["enabled"] or row.get("group_gated"):
        return None
    run_at = row["run_at"]
    pending_one_off = run_at is not None and run_at > now
    try:
        zone = zoneinfo.ZoneInfo(row["timezone"] or default_timezone)
        schedule = parse_schedule(
            row["schedule_type"],
            row["cron_expression"],
            run_at=row["run_at"],
            run_at_fired=row["run_at_fired_at"] is not None and not pending_one_off,
            timezone=zone,
        )
    except (ScheduleError, zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
    return schedule.next_fire(now)


def job_public(row: dict[str, Any], now: datetime, default_timezone: str) -> dict[str, Any]:
    """The job as the API shows it: secrets replaced by flags, read-only fields added."""
    public = {key: value for key, value in row.items() if key not in _PRIVATE}
    capabilities, invalid = read_capabilities(row["capabilities"])
    public["capabilities"] = capabilities
    public["capabilities_invalid"] = invalid
    public["has_auth_secret"] = row["auth_secret"] is not None
    public["group_gated"] = bool(row.get("group_gated"))
    public["body"] = None if row["body"] is None else _json_or_text(row["body"])
    public["next_run_at"] = next_run_at(row, now, default_timezone)
    return public


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


async def _now(conn: AsyncConnection) -> datetime:
    now: datetime = (await conn.execute(select(func.now()))).scalar_one()
    return now


async def list_jobs(
    conn: AsyncConnection, context: RegistryContext, *, group_name: str | None = None
) -> list[dict[str, Any]]:
    return await list_public_jobs(conn, context.default_timezone, group_name=group_name)


async def list_public_jobs(
    conn: AsyncConnection, default_timezone: str, *, group_name: str | None = None
) -> list[dict[str, Any]]:
    """Every job as `job_public` shows it: the redacted path, which needs no key.

    The services that hold no encryption key (mcp, webhook) read jobs only through here
    and `get_public_job`.
    """
    query = _select().order_by(scheduled_jobs.c.group_name, scheduled_jobs.c.name)
    if group_name is not None:
        query = query.where(scheduled_jobs.c.group_name == group_name)
    rows = (await conn.execute(query)).mappings().all()
    now = await _now(conn)
    return [job_public(dict(row), now, default_timezone) for row in rows]


async def load_row(
    conn: AsyncConnection, job_id: uuid.UUID, *, lock: bool = False
) -> dict[str, Any]:
    query = _select().where(scheduled_jobs.c.id == job_id)
    if lock:
        query = query.with_for_update(of=scheduled_jobs)
    row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise NotFound("job not found")
    return dict(row)


async def get_job(
    conn: AsyncConnection, context: RegistryContext, job_id: uuid.UUID
) -> dict[str, Any]:
    return await get_public_job(conn, context.default_timezone, job_id)


async def get_public_job(
    conn: AsyncConnection, default_timezone: str, job_id: uuid.UUID
) -> dict[str, Any]:
    """One job through the redacted path (see `list_public_jobs`); NotFound if unknown."""
    return job_public(await load_row(conn, job_id), await _now(conn), default_timezone)


def _issue_webhook_token() -> tuple[str, dict[str, Any]]:
    token = new_token()
    return token, {
        "webhook_token_hash": digest(token),
        "webhook_token_hint": token[:WEBHOOK_HINT_LENGTH],
        "webhook_token_rotated_at": func.now(),
    }


def _with_token(
    public: dict[str, Any], token: str | None, context: RegistryContext
) -> dict[str, Any]:
    if token is not None:
        # Shown exactly once: only the digest is stored.
        public["webhook_token"] = token
        public["webhook_url"] = context.public_base_url + WEBHOOK_PATH.format(
            job_id=public["id"], token=token
        )
    return public


async def create_job(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    context: RegistryContext,
    job: JobWrite,
) -> dict[str, Any]:
    job_id = uuid.uuid4()
    now = await _now(conn)
    values = await normalise_job(
        conn, job, principal=principal, context=context, job_id=job_id, stored=None, now=now
    )
    token = None
    if values["schedule_type"] == ScheduleType.WEBHOOK:
        token, token_values = _issue_webhook_token()
        values.update(token_values)
    await conn.execute(insert(scheduled_jobs).values(id=job_id, **values))
    await queue_one_off(conn, job_id)
    public = await get_job(conn, context, job_id)
    await record(conn, actor, "job.create", "job", job_id, after=public)
    return _with_token(public, token, context)


async def update_job(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    context: RegistryContext,
    job_id: uuid.UUID,
    job: JobWrite,
) -> dict[str, Any]:
    stored = await load_row(conn, job_id, lock=True)
    now = await _now(conn)
    values = await normalise_job(
        conn, job, principal=principal, context=context, job_id=job_id, stored=stored, now=now
    )
    token = None
    becomes_webhook = values["schedule_type"] == ScheduleType.WEBHOOK
    if becomes_webhook and stored["webhook_token_hash"] is None:
        token, token_values = _issue_webhook_token()
        values.update(token_values)
    elif not becomes_webhook:
        values.update(
            webhook_token_hash=None, webhook_token_hint=None, webhook_token_rotated_at=None
        )
    before = job_public(stored, now, context.default_timezone)
    await conn.execute(
        update(scheduled_jobs)
        .where(scheduled_jobs.c.id == job_id)
        .values(**values, updated_at=func.now())
    )
    await queue_one_off(conn, job_id)
    public = await get_job(conn, context, job_id)
    await record(conn, actor, "job.update", "job", job_id, before=before, after=public)
    return _with_token(public, token, context)


async def patch_job(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    context: RegistryContext,
    job_id: uuid.UUID,
    patch: Mapping[str, Any],
    body_text: str | None = None,
) -> dict[str, Any]:
    """Apply a JSON merge patch to the job, then save it as `update_job` saves a `PUT`.

    `body_text` is the patch's `body` as the client wrote it, if it sets one.
    """
    current = job_public(
        await load_row(conn, job_id, lock=True), await _now(conn), context.default_timezone
    )
    job = patched_job(current, patch).with_body_text(body_text if "body" in patch else None)
    return await update_job(conn, principal, actor, context, job_id, job)


async def delete_job(
    conn: AsyncConnection, actor: Actor, context: RegistryContext, job_id: uuid.UUID
) -> None:
    stored = await load_row(conn, job_id, lock=True)
    await conn.execute(delete(scheduled_jobs).where(scheduled_jobs.c.id == job_id))
    before = job_public(stored, await _now(conn), context.default_timezone)
    await record(conn, actor, "job.delete", "job", job_id, before=before)


async def set_enabled(
    conn: AsyncConnection,
    actor: Actor,
    context: RegistryContext,
    job_id: uuid.UUID,
    enabled: bool,
) -> dict[str, Any]:
    await switch_job(conn, actor, job_id, enabled)
    return await get_job(conn, context, job_id)


async def switch_job(conn: AsyncConnection, actor: Actor, job_id: uuid.UUID, enabled: bool) -> None:
    """Enable or disable one job, audited when it changes; needs no key (MCP uses it too)."""
    stored = await load_row(conn, job_id, lock=True)
    if stored["enabled"] != enabled:
        await conn.execute(
            update(scheduled_jobs)
            .where(scheduled_jobs.c.id == job_id)
            .values(enabled=enabled, updated_at=func.now())
        )
        action = "job.enable" if enabled else "job.disable"
        await record(conn, actor, action, "job", job_id, after={"enabled": enabled})
        await queue_one_off(conn, job_id)


async def set_all_enabled(conn: AsyncConnection, actor: Actor, enabled: bool) -> int:
    """Enable or disable every job; return how many rows changed."""
    changed = await conn.execute(
        update(scheduled_jobs)
        .where(scheduled_jobs.c.enabled.is_not(enabled))
        .values(enabled=enabled, updated_at=func.now())
        .returning(scheduled_jobs.c.id, scheduled_jobs.c.schedule_type)
    )
    rows = changed.all()
    ids: Sequence[uuid.UUID] = [row.id for row in rows]
    for row in rows:
        if row.schedule_type == ScheduleType.ONE_OFF:
            await queue_one_off(conn, row.id)
    action = "job.enable_all" if enabled else "job.disable_all"
    await record(conn, actor, action, "job", None, after={"enabled": enabled, "count": len(ids)})
    return len(ids)


async def webhook_info(conn: AsyncConnection, job_id: uuid.UUID) -> dict[str, Any]:
    row = await load_row(conn, job_id)
    if row["schedule_type"] != ScheduleType.WEBHOOK:
        raise InvalidInput("this job is not webhook-scheduled")
    return {
        "job_id": job_id,
        "webhook_token_hint": row["webhook_token_hint"],
        "webhook_token_rotated_at": row["webhook_token_rotated_at"],
    }


async def rotate_webhook(
    conn: AsyncConnection, actor: Actor, context: RegistryContext, job_id: uuid.UUID
) -> dict[str, Any]:
    """Issue a new token, returned once; the previous URL stops working at once."""
    row = await load_row(conn, job_id, lock=True)
    if row["schedule_type"] != ScheduleType.WEBHOOK:
        raise InvalidInput("this job is not webhook-scheduled")
    token, values = _issue_webhook_token()
    await conn.execute(update(scheduled_jobs).where(scheduled_jobs.c.id == job_id).values(**values))
    info = await webhook_info(conn, job_id)
    await record(
        conn, actor, "job.webhook_rotate", "job", job_id,
        after={"webhook_token_hint": info["webhook_token_hint"]},
    )  # fmt: skip
    return _with_token({**info, "id": job_id}, token, context)
