"""The real `zilean webhook` app served on loopback, and webhook jobs made through the API."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from tests.support.jobs import create
from tests.support.servers import OwnEngineApp, live_server
from zilean.config import Service, WebhookSettings, load_settings
from zilean.db.engine import create_engine
from zilean.webhooks.app import create_webhook_app


@contextmanager
def webhook_service(
    database_url: str, *, limits: tuple[int, int] | None = None, **env: str
) -> Iterator[str]:
    """Serve the webhook service (its settings from `env`) on loopback; yield its base URL.

    `limits` replaces the limiter's (rate per minute, burst); the service has its own
    engine, used only on the server's own event loop.
    """
    settings = load_settings(Service.WEBHOOK, {"DATABASE_URL": database_url, "TZ": "UTC", **env})
    assert isinstance(settings, WebhookSettings)
    if limits is not None:
        settings = dataclasses.replace(settings, rate_per_minute=limits[0], rate_burst=limits[1])
    engine = create_engine(database_url)
    app = OwnEngineApp(create_webhook_app(settings, engine), engine)
    with live_server(app, proxy_headers=False) as base_url:
        yield base_url


async def webhook_job(app: FastAPI, session: str, **fields: Any) -> tuple[dict[str, Any], str]:
    """Create a webhook-scheduled job; return it and the path of its webhook URL."""
    job = await create(app, session, schedule_type="webhook", **fields)
    return job, f"/api/webhooks/{job['id']}/{job['webhook_token']}"
