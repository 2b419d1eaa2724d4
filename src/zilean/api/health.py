"""`GET /healthz`: 200 only while the service can do its job, for probes, `zilean up` and
the process sampler.

Each HTTP service runs the checks on its `app.state.health_checks` (the database for all
of them, plus what a service adds, such as the MCP session manager) and answers 503 with
the first problem otherwise. The sampler stores a service's liveness sample only when
this route answers 200 (`answers_healthz`), so `/api/system/health` reports a service as
live because it answered its own check, not because another service in the same process
took a sample.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.monitoring.sampling import Probe

# Returns None when the service is fine, else the problem in a few words.
HealthCheck = Callable[[FastAPI], Awaitable[str | None]]
PROBE_TIMEOUT = 2.0  # seconds; a check that hangs is a failed check
PATH = "/healthz"

router = APIRouter()


@router.get(PATH, include_in_schema=False)
async def healthz(request: Request) -> JSONResponse:
    problem = await first_problem(request.app)
    if problem is not None:
        return JSONResponse({"error": problem}, status_code=503)
    return JSONResponse({"status": "ok"})


async def first_problem(app: FastAPI) -> str | None:
    checks: list[HealthCheck] = app.state.health_checks
    for check in checks:
        try:
            problem = await asyncio.wait_for(check(app), PROBE_TIMEOUT)
        except TimeoutError:
            problem = f"a health check took over {PROBE_TIMEOUT:g} s"
        if problem is not None:
            return problem
    return None


async def database_reachable(app: FastAPI) -> str | None:
    engine: AsyncEngine = app.state.engine
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError):
        return "the database is unreachable"
    return None


def answers_healthz(app: FastAPI) -> Probe:
    """Return a probe that sends `GET /healthz` through `app` itself, in process, and says
    whether it answered 200 in time: the same request a load balancer would send."""

    async def probe() -> bool:
        status: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": PATH,
            "raw_path": PATH.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"localhost")],
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
        }
        try:
            await asyncio.wait_for(app(scope, receive, send), PROBE_TIMEOUT * 2)
        except TimeoutError:
            return False
        return status == [200]

    return probe
