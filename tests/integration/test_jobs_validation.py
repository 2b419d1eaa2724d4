"""Every write-time rule of a job, one row each: a valid base HTTP or script job with a few
fields changed, and either the 400 it earns (with the message naming the problem) or the
normalised values it is stored with. Then the defaults of a minimal job."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.actors import Cast, client_for

HTTP = {"name": "nightly", "url": "https://api.example.com/run", "cron_expression": "0 3 * * *"}
SCRIPT = {
    "name": "report",
    "job_type": "bash",
    "script_body": "echo hello",
    "cron_expression": "0 3 * * *",
}
MISSING: Any = object()  # drop the field from the body
FUTURE = "2099-01-01T00:00:00Z"
PAST = "2020-01-01T00:00:00Z"
ONE_OFF = {"schedule_type": "one_off", "run_at": FUTURE}
SIXTEEN_LEVELS = "/".join(f"l{n}" for n in range(16))
VOLUME = {"volumes": [{"name": "reports", "mode": "ro"}]}
EMPTY_ON_SCRIPT = "must be empty on a script job"
EMPTY_ON_HTTP = "must be empty on an HTTP job"
NOT_A_URL = "must be an absolute http or https URL"
METHODS = "must be one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"

# fmt: off
CASES = [
    # name
    (HTTP, {"name": MISSING}, 400, "name is required"),  # name omitted
    (HTTP, {"name": ""}, 400, "name is required"),  # empty name
    (HTTP, {"name": "   "}, 400, "name is required"),  # blank name
    (HTTP, {"name": "  nightly  "}, 201, {"name": "nightly"}),  # name is trimmed
    # cron and rate expressions
    (HTTP, {"cron_expression": "0 0 3 * * *"}, 400, "expected exactly 5 fields, got 6"),  # seconds
    (HTTP, {"cron_expression": "61 * * * *"}, 400, 'invalid minute "61"'),  # minute out of range
    (HTTP, {"cron_expression": "0 25 * * *"}, 400, 'invalid hour "25"'),  # hour out of range
    (HTTP, {"cron_expression": "0 3 * * funday"}, 400, "cron_expression: invalid"),  # bad weekday
    (HTTP, {"cron_expression": "@fortnightly"}, 400,
     'unknown descriptor "@fortnightly"'),  # an unknown descriptor
    (HTTP, {"cron_expression": ""}, 400, "cron_expression: is required for a cron"),  # missing
    (HTTP, {"cron_expression": "@daily"}, 201, {"cron_expression": "@daily"}),  # descriptor
    (HTTP, {"cron_expression": "@every 5m"}, 201,
     {"schedule_type": "cron", "cron_expression": "@every 5m"}),  # @every: a descriptor too
    (HTTP, {"cron_expression": "@every 5 m"}, 400,
     'invalid @every duration "5 m"'),  # cron checks an @every duration as rate does
    (HTTP, {"schedule_type": "rate", "cron_expression": "*/5 * * * *"}, 400,
     'a rate schedule must be written "@every <duration>"'),  # rate without @every
    (HTTP, {"schedule_type": "rate", "cron_expression": "@every 5m"}, 201,
     {"schedule_type": "rate", "cron_expression": "@every 5m"}),  # a valid rate
    # exec_timeout_ms
    (HTTP, {"exec_timeout_ms": 0}, 400,
     "exec_timeout_ms: must be at least 1"),  # zero
    (HTTP, {"exec_timeout_ms": 1_800_001}, 400,
     "exec_timeout_ms: must be at most 1800000"),  # over 30 min
    (HTTP, {"exec_timeout_ms": 1_800_000}, 201, {"exec_timeout_ms": 1_800_000}),  # exactly 30 min
    (SCRIPT, {"job_type": "groovy", "exec_timeout_ms": 9999}, 400,
     "exec_timeout_ms: must be at least 10000 for Groovy jobs"),  # Groovy under its minimum
    (SCRIPT, {"job_type": "groovy", "exec_timeout_ms": 10_000}, 201,
     {"job_type": "groovy", "exec_timeout_ms": 10_000}),  # Groovy at its minimum
    (SCRIPT, {"exec_timeout_ms": 9999}, 201, {"exec_timeout_ms": 9999}),  # no minimum for bash
    # pool_count and overlap_policy
    (HTTP, {"pool_count": 0}, 400, "pool_count: must be at least 1"),  # 0
    (HTTP, {"pool_count": 21}, 400, "pool_count: must be at most 20"),  # 21
    (HTTP, {"pool_count": 20}, 201, {"pool_count": 20}),  # the maximum
    (HTTP, {**ONE_OFF, "pool_count": 2}, 400,
     "pool_count: must be 1 for a one_off job"),  # a pool on a one-off
    (HTTP, {"overlap_policy": "queue"}, 400,
     "overlap_policy: must be one of skip, allow"),  # unknown overlap policy
    (HTTP, {"overlap_policy": "allow"}, 201, {"overlap_policy": "allow"}),  # the other policy
    # enums
    (HTTP, {"auth_type": "digest"}, 400,
     "auth_type: must be one of none, bearer, basic, api_key"),  # unknown auth type
    (HTTP, {"schedule_type": "hourly"}, 400,
     "must be one of cron, rate, one_off, webhook"),  # unknown schedule type
    (HTTP, {"job_type": "perl"}, 400,
     "job_type: must be one of http, bash, javascript, typescript, groovy, python"),  # unknown type
    (SCRIPT, {"job_type": "python"}, 201, {"job_type": "python"}),  # our python addition
    (HTTP, {"retry_mode": "linear"}, 400,
     "retry_mode: must be one of exponential, fixed, exponential_jitter"),  # unknown retry mode
    (HTTP, {"retry_mode": "fixed"}, 201, {"retry_mode": "fixed"}),  # fixed delay
    (HTTP, {"retry_mode": "exponential_jitter"}, 201,
     {"retry_mode": "exponential_jitter"}),  # exponential with full jitter
    (HTTP, {"notify_on": "always"}, 400,
     "notify_on: must be one of none, success, failure, both"),  # unknown notify_on (alice)
    (HTTP, {"notify_targets": [0]}, 400, "notify_targets: must hold target ids"),  # not an id
    (HTTP, {"notify_on": "both", "notify_targets": [3, 1, 3]}, 201,
     {"notify_on": "both", "notify_targets": [1, 3]}),  # targets deduplicated and sorted
    # one_off
    (HTTP, {**ONE_OFF, "run_at": PAST}, 400, "run_at: must be in the future"),  # past run_at
    (HTTP, {**ONE_OFF, "run_at": MISSING}, 400,
     "run_at: is required for a one_off schedule"),  # one-off without run_at
    (HTTP, {**ONE_OFF, "run_at": "2099-01-01T00:00:00"}, 400,
     "run_at: must include a UTC offset"),  # naive run_at
    (HTTP, {**ONE_OFF, "cron_expression": "not cron"}, 201,
     {"schedule_type": "one_off", "run_at": FUTURE}),  # cron_expression ignored on a one-off
    (HTTP, {**ONE_OFF, "one_off_after_run": "delete"}, 201,
     {"one_off_after_run": "delete"}),  # delete after the run
    (HTTP, {"run_at": FUTURE}, 201, {"run_at": None}),  # run_at dropped when not a one-off
    # group_name: normalised first, then limited
    (HTTP, {"group_name": "x" * 256}, 400, "group_name must be at most 255 bytes"),  # 256 ASCII
    (HTTP, {"group_name": "é" * 128}, 400, "group_name must be at most 255 bytes"),  # 256 bytes
    (HTTP, {"group_name": "x" * 255}, 201, {"group_name": "x" * 255}),  # exactly 255 bytes
    (HTTP, {"group_name": SIXTEEN_LEVELS + "/l16"}, 400,
     "group_name must be at most 16 levels deep"),  # 17 levels
    (HTTP, {"group_name": SIXTEEN_LEVELS}, 201, {"group_name": SIXTEEN_LEVELS}),  # 16 levels
    (HTTP, {"group_name": " a / /b "}, 201, {"group_name": "a/b"}),  # segments trimmed, blank gone
    (HTTP, {"group_name": SIXTEEN_LEVELS + "/ / /"}, 201,
     {"group_name": SIXTEEN_LEVELS}),  # blank 17th level dropped before the depth check
    (HTTP, {"group_name": "Ops" + " " * 300 + "/ Backups"}, 201,
     {"group_name": "Ops/Backups"}),  # over 255 bytes only before trimming
    # HTTP fields on a script job
    (SCRIPT, {"url": "https://api.example.com"}, 400, f"url: {EMPTY_ON_SCRIPT}"),  # url
    (SCRIPT, {"query_params": {"a": "1"}}, 400, f"query_params: {EMPTY_ON_SCRIPT}"),  # query
    (SCRIPT, {"body": {"a": 1}}, 400, f"body: {EMPTY_ON_SCRIPT}"),  # body
    (SCRIPT, {"headers": {"X-A": "1"}}, 400, f"headers: {EMPTY_ON_SCRIPT}"),  # headers
    (SCRIPT, {"auth_type": "bearer"}, 400, "auth_type: must be none on a script job"),  # auth_type
    (SCRIPT, {"auth_config": {"token": "t"}}, 400,
     f"auth_config: {EMPTY_ON_SCRIPT}"),  # auth_config
    (SCRIPT, {"http_method": "POST"}, 400, f"http_method: {EMPTY_ON_SCRIPT}"),  # http_method
    (SCRIPT, {"script_body": "  "}, 400, "script_body is required for script jobs"),  # no script
    (SCRIPT, {"script_secret_vars": ["bad-name"]}, 400,
     "'bad-name' is not a variable name"),  # a secret var that cannot be a variable
    (SCRIPT, {"capabilities": VOLUME}, 400,
     'capabilities.volumes[0].name: unknown script volume "reports"'),  # undeclared volume
    (SCRIPT, {"capabilities": {"egress": []}}, 400,
     "capabilities.egress: is not supported yet"),  # egress is reserved
    (SCRIPT, {"capabilities": {"volumes": []}}, 201, {"capabilities": {}}),  # no volumes is {}
    # script fields and capabilities on an HTTP job
    (HTTP, {"script_body": "echo hi"}, 400, f"script_body: {EMPTY_ON_HTTP}"),  # script_body
    (HTTP, {"script_args": ["-v"]}, 400, f"script_args: {EMPTY_ON_HTTP}"),  # script_args
    (HTTP, {"script_secret_vars": ["API_KEY"]}, 400,
     f"script_secret_vars: {EMPTY_ON_HTTP}"),  # script_secret_vars
    (HTTP, {"capabilities": VOLUME}, 400, "capabilities: must be empty on an HTTP job"),  # volumes
    (HTTP, {"capabilities": {"volumes": []}}, 201, {"capabilities": {}}),  # an empty declaration
    # url and http_method
    (HTTP, {"url": MISSING}, 400, "url is required for HTTP jobs"),  # no url
    (HTTP, {"url": "  "}, 400, "url is required for HTTP jobs"),  # blank url
    (HTTP, {"url": "/hooks/run"}, 400, f"url: {NOT_A_URL}"),  # relative url
    (HTTP, {"url": "ftp://files.example.com/x"}, 400, f"url: {NOT_A_URL}"),  # not http(s)
    (HTTP, {"url": "{{base_url}}/run"}, 201, {"url": "{{base_url}}/run"}),  # templated origin
    (HTTP, {"http_method": "GET IT!"}, 400, f"http_method: {METHODS}"),  # garbage
    (HTTP, {"http_method": "FETCH"}, 400, f"http_method: {METHODS}"),  # not a method we send
    (HTTP, {"http_method": "x" * 17}, 400, f"http_method: {METHODS}"),  # long
    (HTTP, {"http_method": "delete"}, 201, {"http_method": "DELETE"}),  # any case
    (HTTP, {"http_method": " post "}, 201, {"http_method": "POST"}),  # upper-cased
    # auth shapes
    (HTTP, {"auth_type": "bearer"}, 400, "auth_config.token is required for bearer auth"),  # none
    (HTTP, {"auth_type": "bearer", "auth_config": {"token": ""}}, 400,
     "auth_config.token is required for bearer auth"),  # empty token
    (HTTP, {"auth_type": "basic", "auth_config": {"password": "pw"}}, 400,
     "auth_config.username is required for basic auth"),  # no username
    (HTTP, {"auth_type": "basic", "auth_config": {"username": "ops", "password": ""}}, 201,
     {"auth_config": {"username": "ops"}, "has_auth_secret": False}),  # empty password allowed
    (HTTP, {"auth_type": "api_key", "auth_config": {"header_name": "X-Key"}}, 400,
     "auth_config.api_key is required for api_key auth"),  # no api_key
    (HTTP, {"auth_type": "api_key", "auth_config": {"api_key": "k"}}, 201,
     {"auth_config": {"header_name": "X-API-Key"}, "has_auth_secret": True}),  # default header
    (HTTP, {"auth_type": "api_key", "auth_config": {"api_key": "k", "header_name": "X Key"}}, 400,
     "auth_config.header_name: must be a valid HTTP header name"),  # header with a space
    (HTTP, {"auth_type": "bearer", "auth_config": {"token": "t", "extra": 1}}, 201,
     {"auth_config": {}, "has_auth_secret": True}),  # unknown auth_config keys ignored
    # on_failure_url
    (HTTP, {"on_failure_url": "/failed"}, 400, f"on_failure_url: {NOT_A_URL}"),  # relative
    (HTTP, {"on_failure_url": "ftp://hooks.example.com/f"}, 400,
     f"on_failure_url: {NOT_A_URL}"),  # ftp is not http(s)
    (HTTP, {"on_failure_url": " https://hooks.example.com/f "}, 201,
     {"on_failure_url": "https://hooks.example.com/f"}),  # trimmed absolute https
    # timezone
    (HTTP, {"timezone": "Mars/Olympus_Mons"}, 400, "timezone: must be an IANA time zone"),  # bogus
    (HTTP, {"timezone": "../../etc/passwd"}, 400, "timezone: must be an IANA time zone"),  # a path
    (HTTP, {"timezone": " America/New_York "}, 201, {"timezone": "America/New_York"}),  # trimmed
    # loop and retry
    (HTTP, {"loop_enabled": True, "loop_response_path": "  "}, 400,
     "loop_response_path is required when loop_enabled is true"),  # blank path with loop on
    (HTTP, {"loop_response_path": ""}, 201,
     {"loop_response_path": "result.remaining"}),  # blank with loop off: the default
    (HTTP, {"loop_delay_ms": -1}, 400,
     "loop_delay_ms: must be at least 0"),  # negative delay
    (HTTP, {"loop_max_iterations": 0}, 400,
     "loop_max_iterations: must be at least 1"),  # zero iterations
    (HTTP, {"retry_max_attempts": 0}, 400,
     "retry_max_attempts: must be at least 1"),  # no attempts
    (HTTP, {"retry_max_attempts": 101}, 400,
     "retry_max_attempts: must be at most"),  # over the 100-attempt ceiling
]
# fmt: on


def job_body(base: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in {**base, **fields}.items() if value is not MISSING}


@pytest.mark.parametrize(("base", "fields", "status", "expected"), CASES)
async def test_each_write_rule_accepts_or_rejects_a_job_as_documented(
    core_app: FastAPI,
    cast: Cast,
    base: dict[str, Any],
    fields: dict[str, Any],
    status: int,
    expected: str | dict[str, Any],
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post("/api/jobs", json=job_body(base, fields))
        listed = (await alice.get("/api/jobs")).json()
    assert response.status_code == status, response.text
    if isinstance(expected, str):
        assert expected in response.json()["error"]
        assert listed == []
    else:
        assert {key: response.json()[key] for key in expected} == expected
        assert [job["id"] for job in listed] == [response.json()["id"]]


DEFAULTS = {
    "name": "nightly",
    "group_name": "",
    "enabled": True,
    "schedule_type": "cron",
    "cron_expression": "0 3 * * *",
    "timezone": "",
    "run_at": None,
    "run_at_fired_at": None,
    "one_off_after_run": "keep",
    "webhook_token_hint": None,
    "webhook_token_rotated_at": None,
    "job_type": "http",
    "http_method": "GET",
    "url": "https://api.example.com/run",
    "query_params": {},
    "body": None,
    "headers": {},
    "auth_type": "none",
    "auth_config": {},
    "has_auth_secret": False,
    "script_body": "",
    "script_args": [],
    "script_secret_vars": [],
    "capabilities": {},
    "capabilities_invalid": False,
    "exec_timeout_ms": 60_000,
    "pool_count": 1,
    "overlap_policy": "skip",
    "loop_enabled": False,
    "loop_response_path": "result.remaining",
    "loop_delay_ms": 1000,
    "loop_jitter_ms": 0,
    "loop_max_iterations": 50,
    "retry_enabled": True,
    "retry_mode": "exponential",
    "retry_base_delay_ms": 1000,
    "retry_multiplier": 2,
    "retry_max_delay_ms": 30_000,
    "retry_max_attempts": 5,
    "on_failure_url": "",
    "notify_on": "none",
    "notify_all_targets": False,
    "notify_targets": [],
    "notify_after_failures": 1,
    "notify_reminder_minutes": 0,
    "running_since_by_pool": {},
    "invocations_total": 0,
    "invocations_completed": 0,
    "invocations_failed": 0,
    "group_gated": False,
}
SERVER_STAMPED = {"id", "created_at", "updated_at", "next_run_at"}


async def test_a_job_created_with_only_name_url_and_cron_gets_every_documented_default(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await alice.post("/api/jobs", json=HTTP)
        fetched = await alice.get(f"/api/jobs/{created.json()['id']}")
    assert created.status_code == 201, created.text
    body = created.json()
    assert set(body) == set(DEFAULTS) | SERVER_STAMPED
    assert {key: body[key] for key in DEFAULTS} == DEFAULTS
    assert body["created_at"] == body["updated_at"]
    assert body["next_run_at"].endswith("T03:00:00Z")  # TZ=UTC (pinned for tests): cron runs in UTC
    assert fetched.json() == body


async def test_a_script_job_created_with_only_its_required_fields_gets_the_defaults(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await alice.post("/api/jobs", json=SCRIPT)
    assert created.status_code == 201, created.text
    expected = {
        **DEFAULTS,
        "name": "report",
        "job_type": "bash",
        "url": "",
        "script_body": "echo hello",
    }
    assert {key: created.json()[key] for key in DEFAULTS} == expected
