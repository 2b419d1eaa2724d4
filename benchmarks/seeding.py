"""Jobs and callers for the scenarios, made through Zilean's own registry.

Every job the suite runs is created through `POST /api/jobs` on core's app (in process,
signed in as the benchmark's Super Admin), so it holds exactly what the registry
validates and stores. For thousands of jobs that would take minutes, so one template job
is created through the API and cloned in SQL with only `id`, `name` and the schedule
columns varied; each distinct schedule is first parsed by the registry's own parser.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_core_app
from zilean.auth.bootstrap import seed_super_admin
from zilean.auth.passwords import hash_password
from zilean.auth.sessions import SESSION_COOKIE, create_session
from zilean.config import CoreSettings, Service, load_settings
from zilean.db.tables import scheduled_jobs, users
from zilean.schedules import ScheduleType, load_zone, parse_schedule

# A fixed master key for benchmark databases only; no job here holds a secret.
BENCH_KEY = base64.b64encode(bytes(range(32))).decode()
ADMIN_EMAIL = "bench@localhost"
CLONE_BATCH = 1_000  # rows per INSERT when cloning
# Three zones, as in docs/scheduling.md's measurement; cron jobs spread over them.
ZONES = ("UTC", "America/New_York", "Asia/Tokyo")
# Distinct (expression, zone) pairs among cron jobs, whatever the scale: real fleets
# share common schedules, and it stays under compile_cron's cache of 1,024 pairs.
DISTINCT_CRON = 800


class ApiError(Exception):
    """The registry refused a request the suite relies on."""


async def seed_admin(engine: AsyncEngine) -> str:
    """Create the benchmark's Super Admin and return a session cookie value for it."""
    async with engine.begin() as conn:
        await seed_super_admin(conn, ADMIN_EMAIL, hash_password(uuid.uuid4().hex))
        user_id = (await conn.execute(select(users.c.id).where(users.c.is_bootstrap))).scalar_one()
        return await create_session(conn, user_id, ip="127.0.0.1", user_agent="benchmarks")


def core_settings(database_url: str, **env: str) -> CoreSettings:
    settings = load_settings(
        Service.CORE, {"DATABASE_URL": database_url, "SETTINGS_ENCRYPTION_KEY": BENCH_KEY, **env}
    )
    assert isinstance(settings, CoreSettings)
    return settings


@asynccontextmanager
async def api_client(
    engine: AsyncEngine, database_url: str, session: str
) -> AsyncIterator[httpx.AsyncClient]:
    """Core's app in process (no lifespan, so no scheduler), signed in as the admin."""
    app = create_core_app(core_settings(database_url), engine)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://zilean.bench",
        cookies={SESSION_COOKIE: session},
    ) as client:
        yield client


async def create_job(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await client.post("/api/jobs", json=fields)
    if response.status_code != 201:
        raise ApiError(f"POST /api/jobs answered {response.status_code}: {response.text}")
    body: dict[str, Any] = response.json()
    return body


# What the suite's jobs share unless told otherwise: a yearly cron, so they never fire on
# their own during a run, and no retries.
_QUIET = {"schedule_type": "cron", "cron_expression": "0 3 1 1 *", "retry_enabled": False}


def http_job(name: str, url: str, **fields: Any) -> dict[str, Any]:
    """An HTTP job GETting `url`, quiet (`_QUIET`) unless `fields` say otherwise."""
    return {"name": name, "url": url, **_QUIET, **fields}


def script_job(name: str, job_type: str, body: str, **fields: Any) -> dict[str, Any]:
    """A script job of `job_type` (bash, python, ...), quiet unless `fields` say otherwise."""
    return {"name": name, "job_type": job_type, "script_body": body, **_QUIET, **fields}


@dataclass(frozen=True)
class ScheduleSpec:
    """The schedule columns of one cloned job."""

    schedule_type: str
    cron_expression: str
    timezone: str = ""

    def validate(self) -> None:
        """Parse it as the registry would; raise ScheduleError when it would refuse it."""
        parse_schedule(
            self.schedule_type,
            self.cron_expression,
            timezone=load_zone(self.timezone or "UTC"),
        )


# Columns a clone never copies: identity, and everything the server manages.
_NOT_CLONED = {
    "id", "name", "created_at", "updated_at", "schedule_type", "cron_expression", "timezone",
    "running_since_by_pool", "invocations_total", "invocations_completed",
    "invocations_failed", "webhook_token_hash", "webhook_token_hint", "webhook_token_rotated_at",
}  # fmt: skip


async def clone_jobs(
    engine: AsyncEngine, template_id: str, specs: Sequence[ScheduleSpec], prefix: str
) -> list[uuid.UUID]:
    """Insert one copy of the template job per spec; return the new ids, in spec order."""
    for spec in set(specs):
        spec.validate()
    async with engine.begin() as conn:
        template = (
            (
                await conn.execute(
                    select(scheduled_jobs).where(scheduled_jobs.c.id == uuid.UUID(template_id))
                )
            )
            .mappings()
            .one()
        )
        shared = {k: v for k, v in template.items() if k not in _NOT_CLONED}
        ids = [uuid.uuid4() for _ in specs]
        rows = [
            {
                **shared,
                "id": job_id,
                "name": f"{prefix} {index:05d}",
                "schedule_type": spec.schedule_type,
                "cron_expression": spec.cron_expression,
                "timezone": spec.timezone,
            }
            for index, (job_id, spec) in enumerate(zip(ids, specs, strict=True))
        ]
        for start in range(0, len(rows), CLONE_BATCH):
            await conn.execute(insert(scheduled_jobs), rows[start : start + CLONE_BATCH])
    return ids


def cron_pool(rng: random.Random, *, months: Iterable[int] | None = None) -> list[ScheduleSpec]:
    """Return `DISTINCT_CRON` distinct cron schedules over `ZONES`.

    With `months`, every expression names only those months, so a caller can keep them
    from falling due during a run.
    """
    allowed = sorted(set(months)) if months is not None else None
    seen: set[ScheduleSpec] = set()
    while len(seen) < DISTINCT_CRON:
        minute, hour = rng.randrange(60), rng.randrange(24)
        if allowed is None:
            shape = rng.randrange(3)
            if shape == 0:
                expression = f"{minute} {hour} * * *"
            elif shape == 1:
                expression = f"{minute} {hour} * * {rng.randrange(7)}"
            else:
                expression = f"{minute} {hour} {rng.randrange(1, 29)} * *"
        else:
            month = rng.choice(allowed)
            expression = f"{minute} {hour} {rng.randrange(1, 29)} {month} *"
        seen.add(ScheduleSpec(ScheduleType.CRON, expression, rng.choice(ZONES)))
    return sorted(seen, key=lambda spec: (spec.cron_expression, spec.timezone))


def rare_rates(rng: random.Random, count: int) -> list[ScheduleSpec]:
    """Rate schedules of an hour or more: they never fall due within a run."""
    choices = ("@every 1h", "@every 2h", "@every 6h", "@every 12h", "@every 24h")
    return [ScheduleSpec(ScheduleType.RATE, rng.choice(choices)) for _ in range(count)]


def reconcile_mix(count: int, rng: random.Random) -> list[ScheduleSpec]:
    """docs/scheduling.md's measured mix: 80% cron over three zones, 20% rate."""
    crons = cron_pool(rng)
    cron_count = count * 8 // 10
    specs = [crons[i % len(crons)] for i in range(cron_count)]
    specs += rare_rates(rng, count - cron_count)
    rng.shuffle(specs)
    return specs
