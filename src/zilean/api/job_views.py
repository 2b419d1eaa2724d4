"""How a job looks in API responses, and the one function that decides what a caller sees.

Every route that returns a job passes it through `visible_job` and declares `JobView`, so
the notify rules cannot be forgotten on one route: without `notify:read` the notify fields
are left out (`tests/integration/test_api_contract.py` calls each such route to check).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import Field

from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.registry.kinds import NOTIFY_FIELDS


class JobView(ResponseModel):
    """A job as stored, with secrets replaced by `has_auth_secret` and read-only fields added."""

    id: uuid.UUID
    name: str
    group_name: str
    enabled: bool
    created_at: datetime
    updated_at: datetime
    schedule_type: str
    cron_expression: str
    timezone: str
    run_at: datetime | None
    run_at_fired_at: datetime | None = Field(description="When the one-off was queued.")
    one_off_after_run: str
    webhook_token_hint: str | None = Field(description="The first characters of the token.")
    webhook_token_rotated_at: datetime | None
    job_type: str
    http_method: str
    url: str
    query_params: dict[str, str]
    body: Any = Field(description="The JSON value sent, or the stored text if it is not JSON.")
    headers: dict[str, str]
    auth_type: str
    auth_config: dict[str, Any] = Field(description="Public parts only: secrets are never shown.")
    has_auth_secret: bool
    script_body: str
    script_args: list[str]
    script_secret_vars: list[str]
    capabilities: dict[str, Any]
    capabilities_invalid: bool = Field(
        description="The stored declaration cannot be read; `capabilities` then shows `{}`."
    )
    exec_timeout_ms: int
    pool_count: int
    overlap_policy: str
    loop_enabled: bool
    loop_response_path: str
    loop_delay_ms: int
    loop_jitter_ms: int
    loop_max_iterations: int
    retry_enabled: bool
    retry_mode: str
    retry_base_delay_ms: int
    retry_multiplier: float
    retry_max_delay_ms: int
    retry_max_attempts: int
    on_failure_url: str
    notify_on: str | None = Field(None, description="Shown only with notify:read.")
    notify_all_targets: bool | None = Field(None, description="Shown only with notify:read.")
    notify_targets: list[int] | None = Field(None, description="Shown only with notify:read.")
    notify_after_failures: int | None = Field(None, description="Shown only with notify:read.")
    notify_reminder_minutes: int | None = Field(None, description="Shown only with notify:read.")
    running_since_by_pool: dict[str, Any] = Field(
        description="Pool members running now, by index, with when they started."
    )
    invocations_total: int
    invocations_completed: int
    invocations_failed: int
    group_gated: bool = Field(description="A disabled group holds this job back.")
    next_run_at: datetime | None = Field(
        description="When it next fires on its own; null if disabled, gated, webhook or fired."
    )
    webhook_token: str | None = Field(
        None, description="Only when a webhook token is issued: shown this once."
    )
    webhook_url: str | None = Field(None, description="Only with `webhook_token`.")


# How a route returning a job declares it: checked against `JobView` once, as FastAPI
# serialises it, and the fields `visible_job` left out stay out rather than reading null.
VIEW: dict[str, Any] = {"response_model_exclude_unset": True}


def visible_job(job: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """The job with what `principal` may not read removed: notify fields need notify:read."""
    if principal.can(Permission.NOTIFY_READ):
        return job
    return {key: value for key, value in job.items() if key not in NOTIFY_FIELDS}
