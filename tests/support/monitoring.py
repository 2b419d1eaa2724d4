"""Helpers for the monitoring tests: stored samples, a deadline loop, and Prometheus scrapes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import client_for
from zilean.config import Service
from zilean.db.tables import worker_metrics

T = TypeVar("T")

POLL_INTERVAL = 0.02  # seconds between two looks at a condition


async def eventually(
    check: Callable[[], Awaitable[T | None]], *, within: float = 10.0, what: str = "condition"
) -> T:
    """Return the first truthy value `check()` gives before `within` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within}s (last: {value!r})")
        await asyncio.sleep(POLL_INTERVAL)


async def insert_sample(
    engine: AsyncEngine,
    service: Service | str,
    *,
    age: timedelta | None = None,
    sampled_at: Any = None,
    pid: int = 4242,
    cpu_percent: float = 1.5,
    rss_bytes: int = 50_000_000,
    anon_rss_bytes: int | None = 30_000_000,
    python_allocated_blocks: int = 100_000,
    threads: int = 4,
    asyncio_tasks: int = 3,
    open_fds: int = 12,
) -> int:
    """Store one sample `age` before the database's now (or at `sampled_at`); return its id.

    The sample is its process's only label, as a standalone service stores it.
    """
    when = sampled_at if sampled_at is not None else func.now() - (age or timedelta())
    async with engine.begin() as conn:
        return int(
            (
                await conn.execute(
                    insert(worker_metrics)
                    .values(
                        service=str(service),
                        sampled_at=when,
                        hostname="host-a",
                        pid=pid,
                        cpu_percent=cpu_percent,
                        rss_bytes=rss_bytes,
                        anon_rss_bytes=anon_rss_bytes,
                        python_allocated_blocks=python_allocated_blocks,
                        threads=threads,
                        asyncio_tasks=asyncio_tasks,
                        open_fds=open_fds,
                        process_services=[str(service)],
                    )
                    .returning(worker_metrics.c.id)
                )
            ).scalar_one()
        )


async def age_samples(engine: AsyncEngine, service: Service | str, by: timedelta) -> None:
    """Move every stored sample of `service` `by` into the past."""
    async with engine.begin() as conn:
        await conn.execute(
            update(worker_metrics)
            .where(worker_metrics.c.service == str(service))
            .values(sampled_at=worker_metrics.c.sampled_at - by)
        )


async def stored_samples(engine: AsyncEngine, service: Service | str) -> list[dict[str, Any]]:
    """Every stored sample of `service`, oldest first."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(worker_metrics)
            .where(worker_metrics.c.service == str(service))
            .order_by(worker_metrics.c.id)
        )
        return [dict(row._mapping) for row in rows]


async def live_sample(client: httpx.AsyncClient, service: str) -> dict[str, Any] | None:
    """`GET /api/metrics/live` for `service`: its newest sample, or None before it samples."""
    response = await client.get("/api/metrics/live", params={"service": service})
    assert response.status_code == 200
    body: dict[str, Any] | None = response.json()
    return body


async def create_token(app: FastAPI, session: str, role_id: object) -> str:
    """Create an API token through the API; return its secret."""
    async with client_for(app, session) as client:
        response = await client.post(
            "/api/tokens", json={"name": "scraper", "role_id": str(role_id)}
        )
    assert response.status_code == 201, response.text
    secret: str = response.json()["secret"]
    return secret


Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_exposition(body: str) -> Samples:
    """Every sample line in a Prometheus text body, as sample name -> [(labels, value)]."""
    samples: Samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """One metric's values keyed by one label."""
    return {labels[label]: value for labels, value in samples.get(name, [])}
