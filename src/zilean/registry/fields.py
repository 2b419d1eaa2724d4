"""Every settable job field: its type, default and bounds, in one model.

The model is what `POST`/`PUT /api/jobs` and the CSV import accept, and what the OpenAPI
schema documents. Rules that span fields (HTTP versus script fields, one-off limits,
auth shapes) live in `validation.py`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, PrivateAttr

from zilean.input_models import StrictInput, TextDatetime
from zilean.registry.kinds import (
    DEFAULT_LOOP_RESPONSE_PATH,
    MAX_EXEC_TIMEOUT_MS,
    MAX_NAME_LENGTH,
    MAX_POOL_COUNT,
    MAX_RETRY_ATTEMPTS,
    AuthType,
    JobType,
    NotifyOn,
    OverlapPolicy,
    RetryMode,
)
from zilean.schedules import ScheduleType


def choices(kind: type[StrEnum]) -> dict[str, Any]:
    """The schema's `enum` for a text field the registry checks against `kind`.

    The field stays `str` so that a wrong value gets the registry's own message, naming
    the choices and the value, in the API and the CSV import alike.
    """
    return {"enum": [str(member) for member in kind]}


# Pydantic leaves factory defaults out of the schema: `json_schema_extra` below states them.
Milliseconds = Annotated[int, Field(ge=0, le=86_400_000)]


# What the API returns beside the settable fields: dropped from a write, not refused.
READ_ONLY_FIELDS = frozenset(
    {
        "id",
        "created_at",
        "updated_at",
        "run_at_fired_at",
        "webhook_token_hint",
        "webhook_token_rotated_at",
        "webhook_token",
        "webhook_url",
        "has_auth_secret",
        "capabilities_invalid",
        "running_since_by_pool",
        "invocations_total",
        "invocations_completed",
        "invocations_failed",
        "group_gated",
        "next_run_at",
    }
)


MAX_NOTIFY_AFTER_FAILURES = 1000
MAX_NOTIFY_REMINDER_MINUTES = 10_080  # a week


class JobInput(StrictInput):
    """A write of job fields: the read-only fields of a job view are accepted and dropped."""

    read_only = READ_ONLY_FIELDS


class JobWrite(JobInput):
    """A job as clients send it. `PUT` takes the whole object; omitted fields take defaults."""

    # `body`'s JSON text as the client wrote it, when the caller knows it (`raw_member`).
    _body_text: str | None = PrivateAttr(None)

    def with_body_text(self, text: str | None) -> JobWrite:
        self._body_text = text
        return self

    @property
    def body_text(self) -> str | None:
        return self._body_text

    name: str = Field(max_length=MAX_NAME_LENGTH, description="Required; blank is refused.")
    group_name: str = Field(
        "",
        description="`/` nests groups. Segments are trimmed and blank ones dropped; "
        "at most 255 bytes and 16 levels after that.",
    )
    enabled: bool = True

    schedule_type: str = Field("cron", json_schema_extra=choices(ScheduleType))
    cron_expression: str = Field(
        "",
        description="5-field cron, a descriptor such as `@daily`, or `@every <duration>` "
        "(`cron` or `rate`). Ignored for `one_off` and `webhook`.",
    )
    timezone: str = Field(
        "", description="IANA zone cron is evaluated in; empty means the server's `TZ`."
    )
    run_at: TextDatetime | None = Field(
        None, description="`one_off` only: in the future until fired, then immutable."
    )
    one_off_after_run: str = Field(
        "keep", description="`keep` disables the row after it runs, `delete` removes it; "
        "any other value means `keep`."
    )  # fmt: skip

    job_type: str = Field(
        "http", description="Immutable after creation.", json_schema_extra=choices(JobType)
    )

    http_method: str = Field(
        "GET", description="`GET`, `POST`, `PUT`, `PATCH`, `DELETE`, `HEAD` or `OPTIONS`."
    )
    url: str = Field("", description="Required for HTTP jobs. Supports `{{variable}}`.")
    query_params: dict[str, str] = Field(
        default_factory=dict,
        description="Override same-named URL parameters.",
        json_schema_extra={"default": {}},
    )
    body: Any = Field(None, description="Any JSON value, sent verbatim after substitution.")
    headers: dict[str, str] = Field(default_factory=dict, json_schema_extra={"default": {}})
    auth_type: str = Field("none", json_schema_extra=choices(AuthType))
    auth_config: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"default": {}},
        description="bearer `{token}`, basic `{username, password}`, api_key "
        "`{api_key, header_name}`. Secrets are write-only; an empty secret on PUT keeps it.",
    )

    script_body: str = Field("", description="The script, run verbatim.")
    script_args: list[str] = Field(default_factory=list, json_schema_extra={"default": []})
    script_secret_vars: list[str] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        description="Secret global variables this job may receive as `GLOBALVAR_<name>`.",
    )
    capabilities: dict[str, Any] | None = Field(
        None,
        description='Script volumes: `{"volumes": [{"name": "reports", "mode": "rw"}]}`. '
        "Omitted on PUT: the stored declaration is kept.",
    )

    exec_timeout_ms: int = Field(
        60_000, ge=1, le=MAX_EXEC_TIMEOUT_MS, description="One attempt; Groovy needs 10000+."
    )
    pool_count: int = Field(1, ge=1, le=MAX_POOL_COUNT, description="Must be 1 for `one_off`.")
    overlap_policy: str = Field("skip", json_schema_extra=choices(OverlapPolicy))

    loop_enabled: bool = False
    loop_response_path: str = Field(
        DEFAULT_LOOP_RESPONSE_PATH, description="gjson path; the loop continues on a number > 0."
    )
    loop_delay_ms: Milliseconds = 1000
    loop_jitter_ms: Milliseconds = 0
    loop_max_iterations: int = Field(50, ge=1, le=100_000)

    retry_enabled: bool = True
    retry_mode: str = Field("exponential", json_schema_extra=choices(RetryMode))
    retry_base_delay_ms: int = Field(1000, description="Coalesced to 1000 when <= 0.")
    retry_multiplier: float = Field(2.0, description="Coalesced to 2 when <= 1.")
    retry_max_delay_ms: int = Field(30_000, description="Coalesced to 300000 when <= 0.")
    retry_max_attempts: int = Field(
        5, ge=1, le=MAX_RETRY_ATTEMPTS, description="The attempt budget, fixed at insert."
    )
    on_failure_url: str = Field(
        "", description="An absolute http(s) URL called once when a run finally fails."
    )

    notify_on: str = Field("none", json_schema_extra=choices(NotifyOn))
    notify_all_targets: bool = False
    notify_targets: list[int] = Field(default_factory=list, json_schema_extra={"default": []})
    notify_after_failures: int = Field(
        1,
        ge=1,
        le=MAX_NOTIFY_AFTER_FAILURES,
        description="Failure notices start at this many consecutive failed runs.",
    )
    notify_reminder_minutes: int = Field(
        0,
        ge=0,
        le=MAX_NOTIFY_REMINDER_MINUTES,
        description="While a notified failure streak lasts, notify again at most this often "
        "(0: every failed run notifies).",
    )
