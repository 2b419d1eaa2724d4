"""One local origin for `zilean up`: the spec's reverse-proxy path routing, in process.

Requests reach each service's app directly (no proxy hop). Lifespan events fan out
to every app, so each one starts and stops exactly as it would standalone, except
that the process is sampled once for all four services rather than once by each.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from zilean.api.health import answers_healthz
from zilean.config import Service
from zilean.monitoring.sampling import sampling


@dataclass(frozen=True)
class OriginApps:
    core: FastAPI
    ui: FastAPI
    mcp: FastAPI
    webhook: FastAPI


HOSTED = (Service.CORE, Service.UI, Service.MCP, Service.WEBHOOK)


def route(apps: OriginApps, path: str) -> FastAPI:
    """Pick the service that owns `path`, in the order a reverse proxy must match them."""
    if path.startswith("/api/webhooks/"):
        return apps.webhook
    if path == "/api" or path.startswith("/api/") or path == "/prometheus/metrics":
        return apps.core
    if path == "/mcp" or path.startswith("/mcp/"):
        return apps.mcp
    return apps.ui


class Origin:
    """An ASGI app that dispatches by path to the four HTTP services."""

    def __init__(self, apps: OriginApps) -> None:
        self.apps = apps

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await route(self.apps, scope["path"])(scope, receive, send)

    def _hosted(self) -> tuple[FastAPI, ...]:
        """The apps, in the order of `HOSTED`."""
        return (self.apps.core, self.apps.ui, self.apps.mcp, self.apps.webhook)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        async with AsyncExitStack() as stack:
            await receive()  # lifespan.startup
            try:
                # One sampler for the process: each app's own finds its label covered.
                database_url = self.apps.core.state.settings.database_url
                apps = dict(zip(HOSTED, self._hosted(), strict=True))
                probes = {service: answers_healthz(app) for service, app in apps.items()}
                serving = await stack.enter_async_context(
                    sampling(database_url, *HOSTED, probes=probes)
                )
                for app in apps.values():
                    await stack.enter_async_context(app.router.lifespan_context(app))
                serving.set()
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                raise
            await send({"type": "lifespan.startup.complete"})
            try:
                await receive()  # lifespan.shutdown
            except asyncio.CancelledError:
                # A second Ctrl-C forces the exit: the apps still shut down (the exit
                # stack unwinds here), without a traceback for an ordinary stop.
                return
        await send({"type": "lifespan.shutdown.complete"})
