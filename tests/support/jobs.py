"""Helpers for the job registry tests: a minimal valid job, and create/read/replace calls
that assert success, plus users holding exactly the permissions a test needs."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, add_user, client_for, sign_in_directly
from tests.support.api import create_role

BASE = {"name": "nightly", "url": "https://api.example.com/run", "cron_expression": "0 3 * * *"}
SCRIPT = {
    "name": "report",
    "job_type": "bash",
    "script_body": "echo hi",
    "cron_expression": "@daily",
}
FUTURE = "2099-01-01T00:00:00Z"


async def create(app: FastAPI, session: str, **fields: Any) -> dict[str, Any]:
    async with client_for(app, session) as client:
        response = await client.post("/api/jobs", json={**BASE, **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def fetch(app: FastAPI, session: str, job_id: str) -> dict[str, Any]:
    async with client_for(app, session) as client:
        response = await client.get(f"/api/jobs/{job_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def put(app: FastAPI, session: str, job: dict[str, Any], **changes: Any) -> httpx.Response:
    """Send the whole job back with `changes`, as the spec asks clients to."""
    async with client_for(app, session) as client:
        return await client.put(f"/api/jobs/{job['id']}", json={**job, **changes})


async def session_with(
    app: FastAPI, engine: AsyncEngine, cast: Cast, name: str, permissions: list[str]
) -> str:
    """Sign in a new user whose only role holds `permissions` (made by alice)."""
    role = await create_role(app, cast.alice.session, f"{name} role", permissions)
    return await sign_in_directly(engine, await add_user(engine, f"{name}@example.com", [role]))
