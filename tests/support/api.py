"""Small helpers for the admin API tests: expected bodies, users made through the API,
bearer headers and direct reads of the audit log."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import client_for
from zilean.auth.sessions import SESSION_COOKIE
from zilean.db.tables import audit_log

FORBIDDEN = {"error": "you do not have permission to perform this action"}
PASSWORD_CHANGE_REQUIRED = {"error": "password change required"}
INVALID_TOKEN = {"error": "invalid or expired token"}
# A well-formed id that names nothing.
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"

# The spec's 24 permission keys (`settings:queue_jobs` is our `settings:river_jobs`).
ALL_PERMISSION_KEYS = frozenset(
    {
        "jobs:read",
        "jobs:write",
        "jobs:script",
        "workflows:read",
        "workflows:write",
        "globalvars:read",
        "globalvars:write",
        "metrics:read",
        "users:read",
        "users:write",
        "roles:read",
        "roles:write",
        "invites:create",
        "audit:read",
        "audit:write",
        "settings:smtp",
        "settings:queue_jobs",
        "settings:mcp",
        "scriptvolumes:read",
        "scriptvolumes:write",
        "notify:read",
        "notify:write",
        "notify_settings:read",
        "notify_settings:write",
    }
)
READ_ONLY_KEYS = frozenset(
    {
        "jobs:read",
        "workflows:read",
        "globalvars:read",
        "metrics:read",
        "users:read",
        "roles:read",
        "scriptvolumes:read",
    }
)
ADMIN_KEYS = frozenset(
    {
        "jobs:read",
        "jobs:write",
        "workflows:read",
        "workflows:write",
        "globalvars:read",
        "globalvars:write",
        "metrics:read",
        "audit:read",
        "settings:smtp",
        "settings:queue_jobs",
        "settings:mcp",
        "scriptvolumes:read",
        "scriptvolumes:write",
        "notify:read",
        "notify:write",
        "notify_settings:read",
        "notify_settings:write",
    }
)


@asynccontextmanager
async def served_client(app: FastAPI, session: str) -> AsyncIterator[httpx.AsyncClient]:
    """Like `client_for`, but an unhandled error comes back as the 500 a server would send,
    so a test can assert on the status instead of catching the exception."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://zilean.test", cookies={SESSION_COOKIE: session}
    ) as client:
        yield client


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def create_user(
    app: FastAPI, session: str, email: str, role_ids: list[uuid.UUID]
) -> tuple[uuid.UUID, str]:
    """Create a user through POST /api/users; return their id and temporary password."""
    async with client_for(app, session) as client:
        response = await client.post(
            "/api/users", json={"email": email, "role_ids": [str(r) for r in role_ids]}
        )
    assert response.status_code == 201, response.text
    body = response.json()
    return uuid.UUID(body["user"]["id"]), body["temp_password"]


async def create_role(app: FastAPI, session: str, name: str, permissions: list[str]) -> uuid.UUID:
    async with client_for(app, session) as client:
        response = await client.post("/api/roles", json={"name": name, "permissions": permissions})
    assert response.status_code == 201, response.text
    return uuid.UUID(response.json()["id"])


async def audit_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    """Every audit entry, oldest first, straight from the table."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(audit_log).order_by(audit_log.c.id))).mappings().all()
    return [dict(row) for row in rows]
