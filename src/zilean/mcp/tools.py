"""The nine MCP tools: what an agent may read about jobs and the one-job writes it may make.

Each tool names the permission it needs; a token sees (and may call) only the tools its
role's permissions cover. The tools read and write through the same functions as the
admin API, so results, refusals and audit entries match that API's. There is no
authoring, no bulk action and no script surface, by design: every write names one job.

Jobs are read through the registry's redacted path (the service holds no key) and then
stripped further for an agent: no webhook token hint, and header, query and body values
under secret-looking names masked, as are passwords in URLs.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import Field, StrictBool, StrictInt
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.job_views import visible_job
from zilean.api.routes.activity import JobActivity
from zilean.api.routes.audit import AuditPage
from zilean.api.routes.monitoring import LiveSample, ServiceHistory
from zilean.api.routes.runs import CallEntry
from zilean.audit.log import MASK, Actor, is_secret_key, mask_secrets
from zilean.audit.queries import AuditFilter, list_entries, parse_time
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.errors import InvalidInput
from zilean.execution.history import DEFAULT_CALLS_LIMIT, MAX_CALLS_LIMIT, recent_calls
from zilean.execution.run_now import run_now
from zilean.input_models import StrictInput, TextUUID
from zilean.jobkinds.redaction import NO_SECRETS
from zilean.monitoring.activity import job_activity
from zilean.monitoring.samples import latest_sample, parse_service, sample_history
from zilean.monitoring.window import Window
from zilean.registry.jobs import get_public_job, list_public_jobs, load_row, switch_job
from zilean.registry.kinds import JobType
from zilean.schedules import ScheduleType

# Header names that carry credentials without looking like it to `is_secret_key`.
_CREDENTIAL_HEADERS = frozenset({"cookie", "proxy_authorization", "set_cookie"})
# What a job listing shows; `zilean_get_job` has the rest.
SUMMARY_FIELDS = (
    "id",
    "name",
    "group_name",
    "enabled",
    "group_gated",
    "job_type",
    "schedule_type",
    "cron_expression",
    "timezone",
    "run_at",
    "next_run_at",
    "overlap_policy",
    "pool_count",
    "capabilities",
    "invocations_total",
    "invocations_completed",
    "invocations_failed",
)


@dataclass(frozen=True)
class Call:
    """One tool call: who makes it (the token's service account) and what it may use."""

    engine: AsyncEngine
    principal: Principal
    actor: Actor
    default_timezone: str


Arguments = StrictInput
Run = Callable[[Call, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Tool:
    name: str
    permission: Permission
    title: str
    description: str
    arguments: type[Arguments]
    run: Run
    read_only: bool = True

    def input_schema(self) -> dict[str, Any]:
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        for field in schema.get("properties", {}).values():
            field.pop("title", None)
        return schema


def _secret_name(name: str) -> bool:
    key = name.strip().lower().replace("-", "_")
    return is_secret_key(key) or key in _CREDENTIAL_HEADERS


def _masked(values: dict[str, Any]) -> dict[str, Any]:
    return {key: MASK if _secret_name(key) and value else value for key, value in values.items()}


def agent_job(job: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """A job as an agent may read it: the API's view, minus anything secret-looking."""
    view = dict(visible_job(job, principal))
    view.pop("webhook_token_hint", None)
    view["url"] = NO_SECRETS.redact(view["url"])  # a password in `scheme://user:pw@host`
    view["on_failure_url"] = NO_SECRETS.redact(view["on_failure_url"])
    view["headers"] = _masked(view["headers"])
    view["query_params"] = _masked(view["query_params"])
    if isinstance(view["body"], dict | list):
        view["body"] = mask_secrets(view["body"])
    return view


def job_summary(job: dict[str, Any]) -> dict[str, Any]:
    return {key: job[key] for key in SUMMARY_FIELDS}


# Arguments. StrictInput refuses unknown names and wrong JSON types with a message
# naming the field; identifiers are read from their string form.


class NoArguments(Arguments):
    pass


class ListJobsArguments(Arguments):
    group_name: str | None = Field(None, description="Only jobs in this group ('' = ungrouped).")
    enabled: StrictBool | None = Field(None, description="Only enabled (true) or disabled jobs.")
    job_type: JobType | None = Field(None, description="Only jobs of this type.")
    schedule_type: ScheduleType | None = Field(
        None, description="Only jobs with this kind of schedule."
    )
    name_contains: str | None = Field(
        None, description="Only jobs whose name contains this text (case-insensitive)."
    )


class JobArguments(Arguments):
    job_id: TextUUID = Field(description="The job's id (a UUID), as zilean_list_jobs shows it.")


class ActivityArguments(JobArguments):
    since: str | None = Field(
        None, description="How far back to look: a duration such as 90m or 24h (default 24h)."
    )
    buckets: StrictInt | None = Field(
        None, description="How many time slots to split the window into (default 40, max 500)."
    )


class RecentCallsArguments(JobArguments):
    limit: StrictInt | None = Field(
        None,
        description=f"How many attempts, newest first (default {DEFAULT_CALLS_LIMIT}, "
        f"at most {MAX_CALLS_LIMIT}).",
    )


class WorkerMetricsArguments(Arguments):
    service: str | None = Field(
        None,
        description="The service: worker (default), core, ui, mcp, webhook, "
        "script-worker-bash, script-worker-node, script-worker-groovy or script-worker-python.",
    )
    since: str | None = Field(
        None, description="How far back: a duration such as 6h (default 24h)."
    )
    buckets: StrictInt | None = Field(
        None, description="How many time slots (default 40, max 500)."
    )


class AuditArguments(Arguments):
    actor_user_id: TextUUID | None = Field(None, description="Only entries by this account.")
    action: str | None = Field(None, description="Only this action, such as job.run or job.update.")
    resource_type: str | None = Field(None, description="Only this resource type, such as job.")
    resource_id: str | None = Field(
        None, description="Only entries about this resource (a job id, say) on this page."
    )
    since: str | None = Field(None, description="Only entries at or after this RFC 3339 time.")
    until: str | None = Field(None, description="Only entries before this RFC 3339 time.")
    cursor: str | None = Field(None, description="next_cursor from the previous page.")


def _text(value: StrictInt | None) -> str | None:
    return None if value is None else str(value)


# The tools.


async def list_jobs(call: Call, args: ListJobsArguments) -> dict[str, Any]:
    async with call.engine.connect() as conn:
        jobs = await list_public_jobs(conn, call.default_timezone, group_name=args.group_name)
    needle = (args.name_contains or "").lower()
    found = [
        job_summary(job)
        for job in jobs
        if (args.enabled is None or job["enabled"] is args.enabled)
        and (args.job_type is None or job["job_type"] == args.job_type)
        and (args.schedule_type is None or job["schedule_type"] == args.schedule_type)
        and needle in job["name"].lower()
    ]
    return {"count": len(found), "jobs": found}


async def get_job(call: Call, args: JobArguments) -> dict[str, Any]:
    async with call.engine.connect() as conn:
        job = await get_public_job(conn, call.default_timezone, args.job_id)
    return {"job": agent_job(job, call.principal)}


async def activity(call: Call, args: ActivityArguments) -> dict[str, Any]:
    window = Window.from_query(args.since, _text(args.buckets))
    async with call.engine.connect() as conn:
        found = await job_activity(conn, args.job_id, window)
    return JobActivity.model_validate(found).model_dump(mode="json")


async def calls(call: Call, args: RecentCallsArguments) -> dict[str, Any]:
    if args.limit is not None and args.limit < 1:
        raise InvalidInput("limit: must be a positive integer")
    limit = min(args.limit or DEFAULT_CALLS_LIMIT, MAX_CALLS_LIMIT)
    async with call.engine.connect() as conn:
        await load_row(conn, args.job_id)  # unknown job: not found
        entries = await recent_calls(conn, args.job_id, limit)
    return {
        "job_id": str(args.job_id),
        "calls": [CallEntry.model_validate(entry).model_dump(mode="json") for entry in entries],
    }


async def worker_metrics(call: Call, args: WorkerMetricsArguments) -> dict[str, Any]:
    service = parse_service(args.service)
    assert service is not None
    window = Window.from_query(args.since, _text(args.buckets))
    async with call.engine.connect() as conn:
        latest = await latest_sample(conn, service)
        window_start, series = await sample_history(conn, window, (service,))
    history = ServiceHistory.model_validate(
        {**window.geometry(window_start), "service": service, "samples": series[service]}
    )
    return {
        "service": str(service),
        "latest": None
        if latest is None
        else LiveSample.model_validate(latest).model_dump(mode="json"),
        "history": history.model_dump(mode="json"),
    }


async def audit_log(call: Call, args: AuditArguments) -> dict[str, Any]:
    where = AuditFilter(
        actor_user_id=args.actor_user_id,
        action=args.action or None,
        resource_type=args.resource_type or None,
        since=parse_time("since", args.since),
        until=parse_time("until", args.until),
        cursor=args.cursor or None,
    )
    async with call.engine.connect() as conn:
        page = AuditPage.model_validate(await list_entries(conn, where)).model_dump(mode="json")
    if args.resource_id:
        page["entries"] = [e for e in page["entries"] if e["resource_id"] == args.resource_id]
    return page


async def _switch(call: Call, job_id: uuid.UUID, enabled: bool) -> dict[str, Any]:
    async with call.engine.begin() as conn:
        before = await load_row(conn, job_id)
        await switch_job(conn, call.actor, job_id, enabled)
        job = await get_public_job(conn, call.default_timezone, job_id)
    return {"changed": before["enabled"] is not enabled, "job": job_summary(job)}


async def enable_job(call: Call, args: JobArguments) -> dict[str, Any]:
    return await _switch(call, args.job_id, True)


async def disable_job(call: Call, args: JobArguments) -> dict[str, Any]:
    return await _switch(call, args.job_id, False)


async def run_job(call: Call, args: JobArguments) -> dict[str, Any]:
    async with call.engine.begin() as conn:
        firing = await run_now(conn, call.actor, args.job_id)
    return {
        "job_id": str(args.job_id),
        "queued": len(firing.queue_job_ids),
        "busy_members": firing.busy_members,
    }


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="zilean_list_jobs",
        permission=Permission.JOBS_READ,
        title="List jobs",
        description=(
            "List Zilean's scheduled jobs, ordered by group and name, optionally filtered. "
            "Each entry has the job's id, name, group, whether it is enabled (and whether a "
            "disabled group holds it back), its type, schedule, next run time, the script "
            "volumes it declares (capabilities) and its lifetime run counters. Use the id "
            "with the other tools; zilean_get_job shows a job's full configuration."
        ),
        arguments=ListJobsArguments,
        run=list_jobs,
    ),
    Tool(
        name="zilean_get_job",
        permission=Permission.JOBS_READ,
        title="Get a job",
        description=(
            "Read one job's full configuration: schedule, request or script, loop, retry and "
            "pool settings, declared volumes (capabilities) and counters. Credentials are "
            "never shown: has_auth_secret says whether one is stored, and values under "
            "secret-looking header, parameter or body names read ***."
        ),
        arguments=JobArguments,
        run=get_job,
    ),
    Tool(
        name="zilean_job_activity",
        permission=Permission.JOBS_READ,
        title="Job activity",
        description=(
            "One job's call volume and latency over a recent window, in time slots (only "
            "slots with calls are listed), plus its lifetime totals of runs, completions "
            "and failures. Use it to see whether a job runs, how often it fails, how slow it is."
        ),
        arguments=ActivityArguments,
        run=activity,
    ),
    Tool(
        name="zilean_recent_calls",
        permission=Permission.JOBS_READ,
        title="Recent calls",
        description=(
            "One job's most recent attempts, newest first: state (running, succeeded, "
            "retrying, failed, cancelled), attempt number, trigger, timing, error and what "
            "the call sent and got back (HTTP status and response start, or a script's exit "
            "code and output). Secret values read REDACTED. Use it to find why a job fails."
        ),
        arguments=RecentCallsArguments,
        run=calls,
    ),
    Tool(
        name="zilean_worker_metrics",
        permission=Permission.METRICS_READ,
        title="Service metrics",
        description=(
            "CPU and memory of one Zilean service: its latest once-a-minute sample (null if "
            "it never sampled) and the samples over a recent window, averaged per time slot "
            "with peaks. Use it to check a worker's load or whether a service is running."
        ),
        arguments=WorkerMetricsArguments,
        run=worker_metrics,
    ),
    Tool(
        name="zilean_audit_log",
        permission=Permission.AUDIT_READ,
        title="Audit log",
        description=(
            "Who changed what and when, newest first, 50 entries a page (pass next_cursor "
            "back as cursor for more). Filter by actor, action (job.run, job.enable, "
            "job.update...), resource type or time. Secrets in snapshots read ***."
        ),
        arguments=AuditArguments,
        run=audit_log,
    ),
    Tool(
        name="zilean_enable_job",
        permission=Permission.JOBS_WRITE,
        title="Enable a job",
        description=(
            "Enable one job so that it runs on its schedule again. Acts on exactly one job; "
            "enabling an enabled job changes nothing. Recorded in the audit log."
        ),
        arguments=JobArguments,
        run=enable_job,
        read_only=False,
    ),
    Tool(
        name="zilean_disable_job",
        permission=Permission.JOBS_WRITE,
        title="Disable a job",
        description=(
            "Disable one job: it stops firing on its schedule until enabled again (runs "
            "already under way finish). Acts on exactly one job. Recorded in the audit log."
        ),
        arguments=JobArguments,
        run=disable_job,
        read_only=False,
    ),
    Tool(
        name="zilean_run_job",
        permission=Permission.JOBS_WRITE,
        title="Run a job now",
        description=(
            "Queue one job to run immediately, whatever its schedule: one attempt per free "
            "pool member (busy_members lists those skipped because they still run). Refused, "
            "with the reason, when the job or its group is disabled, when it is a one_off or "
            "webhook job, or when every pool member is still running. Recorded in the audit log."
        ),
        arguments=JobArguments,
        run=run_job,
        read_only=False,
    ),
)

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def tools_for(principal: Principal) -> list[Tool]:
    """The tools `principal`'s permissions cover, in the table's order."""
    return [tool for tool in TOOLS if principal.can(tool.permission)]
