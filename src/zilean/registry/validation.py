"""Turn a `JobWrite` into the column values of a `scheduled_jobs` row, or refuse it.

Every rule that spans fields lives here, so the API and the CSV import reject the same
rows with the same messages. Server-managed columns are never taken from the client.
"""

from __future__ import annotations

import json
import re
import uuid
import zoneinfo
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import CoreSettings
from zilean.crypto.secretbox import SecretBox
from zilean.errors import Conflict, InvalidInput, PermissionDenied
from zilean.jobkinds.definitions import JOB_KINDS
from zilean.registry.auth_secrets import StoredAuth, parse_auth_type, prepare_auth
from zilean.registry.fields import JobWrite
from zilean.registry.groups import valid_group_name
from zilean.registry.kinds import (
    DEFAULT_LOOP_RESPONSE_PATH,
    NOTIFY_FIELDS,
    JobType,
    NotifyOn,
    OneOffAfterRun,
    OverlapPolicy,
    RetryMode,
)
from zilean.registry.volumes import validate_capabilities
from zilean.schedules import ScheduleType, parse_schedule

SCRIPT_PERMISSION_MESSAGE = "script jobs require the jobs:script permission"
# The methods the job editor offers; anything else is a typo, not a request to send.
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_VARIABLE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class RegistryContext:
    """What validation needs from the service: the key for auth secrets and the default TZ."""

    box: SecretBox
    default_timezone: str
    public_base_url: str

    @classmethod
    def of(cls, settings: CoreSettings) -> RegistryContext:
        return cls(
            box=SecretBox(settings.settings_encryption_key),
            default_timezone=settings.timezone,
            public_base_url=settings.public_base_url,
        )


def _choice(field: str, value: str, kind: type[Any]) -> Any:
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise InvalidInput(f"{field}: must be one of {choices} (got {value!r})") from None


def _absolute_http_url(field: str, value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise InvalidInput(f"{field}: must be an absolute http or https URL")


def _check_url(url: str, job_id: uuid.UUID | None) -> str:
    url = url.strip()
    if not url:
        raise InvalidInput("url is required for HTTP jobs")
    # A templated scheme or host is resolved at run time; check only what is literal.
    head = url.split("/", 3)[:3]
    if "{{" not in "/".join(head):
        _absolute_http_url("url", url)
    if job_id is not None and _targets_own_webhook(url, job_id):
        raise InvalidInput("url: must not call this job's own webhook (it would trigger itself)")
    return url


def _targets_own_webhook(url: str, job_id: uuid.UUID) -> bool:
    """True when the path names this job's webhook, however its id is spelled."""
    segments = [segment for segment in urlsplit(url).path.split("/") if segment]
    for index in range(len(segments) - 2):
        if segments[index : index + 2] == ["api", "webhooks"]:
            try:
                if uuid.UUID(segments[index + 2]) == job_id:
                    return True
            except ValueError:
                continue
    return False


def job_zone(timezone: str, default: str) -> zoneinfo.ZoneInfo:
    """The zone a job's (or a preview's) cron runs in: its own, else the server's."""
    name = timezone.strip() or default
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"timezone: must be an IANA time zone such as Europe/Paris (got {timezone!r})"
        ) from None


def _require_empty(job: JobWrite, fields: tuple[str, ...], kind: str) -> None:
    defaults = JobWrite.model_fields
    for field in fields:
        value = getattr(job, field)
        default = defaults[field].get_default(call_default_factory=True)
        if value not in (default, None, "", {}, []):
            raise InvalidInput(f"{field}: must be empty on {kind}")


async def normalise_job(
    conn: AsyncConnection,
    job: JobWrite,
    *,
    principal: Principal,
    context: RegistryContext,
    job_id: uuid.UUID,
    stored: dict[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """Return the row values for `job`, applying every write-time rule."""
    values: dict[str, Any] = {}
    name = job.name.strip()
    if not name:
        raise InvalidInput("name is required")
    values["name"] = name
    values["group_name"] = valid_group_name(job.group_name)
    values["enabled"] = job.enabled

    job_type: JobType = _choice("job_type", job.job_type, JobType)
    if stored is not None and stored["job_type"] != job_type:
        raise Conflict("job_type: cannot be changed after the job is created")
    kind = JOB_KINDS[job_type]
    if kind.is_script and not principal.can(Permission.JOBS_SCRIPT):
        raise PermissionDenied(SCRIPT_PERMISSION_MESSAGE)
    values["job_type"] = str(job_type)

    values.update(_schedule_values(job, context=context, stored=stored, now=now))

    if kind.is_script:
        values.update(await _script_values(conn, job, job_type, principal=principal, stored=stored))
    else:
        values.update(await _http_values(conn, job, context=context, job_id=job_id, stored=stored))

    if job.exec_timeout_ms < kind.min_exec_timeout_ms:
        raise InvalidInput(
            f"exec_timeout_ms: must be at least {kind.min_exec_timeout_ms} for {kind.label} jobs"
        )
    if values["schedule_type"] == ScheduleType.ONE_OFF and job.pool_count != 1:
        raise InvalidInput("pool_count: must be 1 for a one_off job")
    values["exec_timeout_ms"] = job.exec_timeout_ms
    values["pool_count"] = job.pool_count
    values["overlap_policy"] = str(_choice("overlap_policy", job.overlap_policy, OverlapPolicy))

    if job.loop_enabled and not job.loop_response_path.strip():
        raise InvalidInput("loop_response_path is required when loop_enabled is true")
    values.update(
        loop_enabled=job.loop_enabled,
        # Blank while the loop is off means "the default", so an export round-trips.
        loop_response_path=job.loop_response_path.strip() or DEFAULT_LOOP_RESPONSE_PATH,
        loop_delay_ms=job.loop_delay_ms,
        loop_jitter_ms=job.loop_jitter_ms,
        loop_max_iterations=job.loop_max_iterations,
    )
    if job.on_failure_url.strip():
        _absolute_http_url("on_failure_url", job.on_failure_url.strip())
    values.update(
        retry_enabled=job.retry_enabled,
        retry_mode=str(_choice("retry_mode", job.retry_mode, RetryMode)),
        retry_base_delay_ms=job.retry_base_delay_ms,
        retry_multiplier=job.retry_multiplier,
        retry_max_delay_ms=job.retry_max_delay_ms,
        retry_max_attempts=job.retry_max_attempts,
        on_failure_url=job.on_failure_url.strip(),
    )
    values.update(_notify_values(job, principal=principal, stored=stored))
    return values


def _schedule_values(
    job: JobWrite, *, context: RegistryContext, stored: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    zone = job_zone(job.timezone, context.default_timezone)
    is_one_off = job.schedule_type == ScheduleType.ONE_OFF
    was_one_off = stored is not None and stored["schedule_type"] == ScheduleType.ONE_OFF
    # The fired guard survives only while the job stays a one-off.
    fired_at = (
        stored["run_at_fired_at"] if stored is not None and was_one_off and is_one_off else None
    )
    run_at = job.run_at if is_one_off else None
    # parse_schedule also rejects an unknown schedule_type, with the preview's message.
    parse_schedule(
        job.schedule_type,
        job.cron_expression,
        run_at=run_at,
        run_at_fired=fired_at is not None,
        timezone=zone,
    )
    schedule_type = ScheduleType(job.schedule_type)
    if run_at is not None:
        if fired_at is not None:
            assert stored is not None
            if stored["run_at"] is None or run_at.timestamp() != stored["run_at"].timestamp():
                raise InvalidInput("run_at: cannot change after the one-off has fired")
        elif run_at <= now:
            raise InvalidInput("run_at: must be in the future")
    after_run = (
        OneOffAfterRun.DELETE
        if job.one_off_after_run.strip().lower() == OneOffAfterRun.DELETE
        else OneOffAfterRun.KEEP  # unknown values fall through to keep
    )
    return {
        "schedule_type": str(schedule_type),
        "cron_expression": job.cron_expression.strip(),
        "timezone": job.timezone.strip(),
        "run_at": run_at,
        # Switching away from one_off clears the fired guard; staying keeps it.
        "run_at_fired_at": fired_at,
        "one_off_after_run": str(after_run),
    }


async def _http_values(
    conn: AsyncConnection,
    job: JobWrite,
    *,
    context: RegistryContext,
    job_id: uuid.UUID,
    stored: dict[str, Any] | None,
) -> dict[str, Any]:
    _require_empty(job, ("script_body", "script_args", "script_secret_vars"), "an HTTP job")
    if job.capabilities:
        await validate_capabilities(conn, job.capabilities, job_type=JobType.HTTP)
    method = job.http_method.strip().upper() or "GET"
    if method not in HTTP_METHODS:
        raise InvalidInput(f"http_method: must be one of {', '.join(HTTP_METHODS)}")
    url = _check_url(job.url, job_id if stored is not None else None)
    auth_type = parse_auth_type(job.auth_type)
    previous = (
        StoredAuth(parse_auth_type(stored["auth_type"]), stored["auth_secret"])
        if stored is not None
        else None
    )
    public, secret = prepare_auth(
        auth_type, job.auth_config, job_id=job_id, stored=previous, box=context.box
    )
    return {
        "http_method": method,
        "url": url,
        "query_params": job.query_params,
        "body": _body_text(job, stored),
        "headers": job.headers,
        "auth_type": str(auth_type),
        "auth_config": public,
        "auth_secret": secret,
        "script_body": "",
        "script_args": [],
        "script_secret_vars": [],
        "capabilities": {},
    }


def _body_text(job: JobWrite, stored: dict[str, Any] | None) -> str | None:
    """What the job will send. While the value is unchanged (a `PATCH` of another field, a
    `PUT` of what `GET` showed), the stored text stays as it was; a new value is kept as
    the client wrote it, or else plainly encoded: `"Zürich"` never becomes `"Z\\u00fcrich"`."""
    if job.body is None:
        return None
    if stored is not None and stored["body"] is not None:
        try:
            unchanged = _canonical(json.loads(stored["body"])) == _canonical(job.body)
        except ValueError:
            unchanged = False
        if unchanged:
            return str(stored["body"])
    if job.body_text is not None:
        return job.body_text
    return json.dumps(job.body, ensure_ascii=False)


def _canonical(value: Any) -> str:
    # `1`, `1.0` and `true` compare equal in Python; their JSON spellings do not.
    return json.dumps(value, sort_keys=True)


async def _script_values(
    conn: AsyncConnection,
    job: JobWrite,
    job_type: JobType,
    *,
    principal: Principal,
    stored: dict[str, Any] | None,
) -> dict[str, Any]:
    _require_empty(job, ("url", "query_params", "body", "headers", "auth_config"), "a script job")
    if job.auth_type not in ("", "none"):
        raise InvalidInput("auth_type: must be none on a script job")
    if job.http_method.strip().upper() not in ("", "GET"):
        raise InvalidInput("http_method: must be empty on a script job")
    if not job.script_body.strip():
        raise InvalidInput("script_body is required for script jobs")
    secret_vars = list(dict.fromkeys(name.strip() for name in job.script_secret_vars))
    for variable in secret_vars:
        if not _VARIABLE_NAME.match(variable):
            raise InvalidInput(f"script_secret_vars: {variable!r} is not a variable name")
    previous_vars = list(stored["script_secret_vars"]) if stored is not None else []
    if (
        secret_vars != previous_vars
        and secret_vars
        and not principal.can(Permission.GLOBALVARS_WRITE)
    ):
        raise PermissionDenied(
            "script_secret_vars requires both the jobs:script and globalvars:write permissions"
        )
    if job.capabilities is None:
        capabilities = stored["capabilities"] if stored is not None else {}
    else:
        capabilities = await validate_capabilities(conn, job.capabilities, job_type=job_type)
    return {
        "http_method": "GET",
        "url": "",
        "query_params": {},
        "body": None,
        "headers": {},
        "auth_type": "none",
        "auth_config": {},
        "auth_secret": None,
        "script_body": job.script_body,
        "script_args": job.script_args,
        "script_secret_vars": secret_vars,
        "capabilities": capabilities,
    }


def _notify_values(
    job: JobWrite, *, principal: Principal, stored: dict[str, Any] | None
) -> dict[str, Any]:
    """Without notify:write the notify fields are not the caller's to change: a stored
    config is carried forward unchanged, and a new job gets the defaults."""
    if not principal.can(Permission.NOTIFY_WRITE):
        if stored is not None:
            return {field: stored[field] for field in NOTIFY_FIELDS}
        return {
            "notify_on": "none",
            "notify_all_targets": False,
            "notify_targets": [],
            "notify_after_failures": 1,
            "notify_reminder_minutes": 0,
        }
    notify_on: NotifyOn = _choice("notify_on", job.notify_on, NotifyOn)
    if any(target < 1 for target in job.notify_targets):
        raise InvalidInput("notify_targets: must hold target ids (positive integers)")
    return {
        "notify_on": str(notify_on),
        "notify_all_targets": job.notify_all_targets,
        "notify_targets": sorted(set(job.notify_targets)),
        "notify_after_failures": job.notify_after_failures,
        "notify_reminder_minutes": job.notify_reminder_minutes,
    }
