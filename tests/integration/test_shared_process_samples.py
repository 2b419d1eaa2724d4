"""A process hosting several services is sampled once: `sampling` blocks nested in a
host's, and `zilean up`'s single origin on a live server, scraped and read through the API."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_service_apps import build_apps
from tests.support.actors import Cast
from tests.support.api import bearer
from tests.support.monitoring import (
    by_label,
    create_token,
    eventually,
    live_sample,
    parse_exposition,
    stored_samples,
)
from tests.support.servers import free_port, live_server
from zilean.config import ScriptRuntime, Service, load_settings, script_worker_service
from zilean.db.engine import create_engine
from zilean.monitoring.sampling import sampling
from zilean.services.origin import Origin
from zilean.webhooks.app import create_webhook_app

HTTP_SERVICES = [Service.CORE, Service.UI, Service.MCP, Service.WEBHOOK]
UP_LABEL = "core,ui,mcp,webhook"


def samplers() -> list[str]:
    return sorted(
        task.get_name()
        for task in asyncio.all_tasks()
        if task.get_name().startswith("zilean-sampling-")
    )


async def measurements(engine: AsyncEngine, service: Service) -> list[tuple[Any, ...]]:
    """The (sampled_at, pid, process_services) of each stored sample of `service`."""
    return [
        (row["sampled_at"], row["pid"], row["process_services"])
        for row in await stored_samples(engine, service)
    ]


async def test_a_hosts_block_covers_the_services_own_blocks(
    engine: AsyncEngine, database_url: str
) -> None:
    bash, node, groovy = (
        script_worker_service(ScriptRuntime.BASH),
        script_worker_service(ScriptRuntime.NODE),
        script_worker_service(ScriptRuntime.GROOVY),
    )
    # The host's block, then a service's own inside it (covered: it samples nothing more).
    async with sampling(database_url, bash, node), sampling(database_url, node):
        assert samplers() == ["zilean-sampling-script-worker-bash,script-worker-node"]
        # One not yet covered gets a sampler of its own.
        async with sampling(database_url, node, groovy):
            assert len(samplers()) == 2
            await eventually(lambda: stored_samples(engine, groovy), what="groovy's sample")
        await eventually(lambda: stored_samples(engine, node), what="the host's sample")
    assert samplers() == []
    [shared] = await measurements(engine, bash)
    assert await measurements(engine, node) == [shared]  # the very same measurement
    assert shared[1:] == (os.getpid(), ["script-worker-bash", "script-worker-node"])
    [(_, _, alone)] = await measurements(engine, groovy)
    assert alone == ["script-worker-groovy"]


async def test_zilean_ups_origin_samples_its_process_once_for_its_four_services(
    database_url: str, engine: AsyncEngine, cast: Cast
) -> None:
    apps = build_apps(database_url, engine)
    secret = await create_token(apps.core, cast.carol.session, cast.role_ids["read_only"])
    with live_server(Origin(apps)) as base:
        async with httpx.AsyncClient(base_url=base, headers=bearer(secret)) as client:
            live = await eventually(
                lambda: live_sample(client, "webhook"), what="the origin's start-up sample"
            )
            # Core's exporter may have refreshed before that sample landed: refresh again.
            await apps.core.state.metrics_exporter.refresh()
            scraped = parse_exposition((await client.get("/prometheus/metrics")).text)
            health = (await client.get("/api/system/health")).json()
    stored = {service: await measurements(engine, service) for service in HTTP_SERVICES}
    # Every sample is one measurement stored under all four labels: no app sampled alone.
    assert stored[Service.CORE]
    assert all(rows == stored[Service.CORE] for rows in stored.values())
    assert {tuple(hosted) for _, _, hosted in stored[Service.CORE]} == {tuple(UP_LABEL.split(","))}
    assert live["process_services"] == ["core", "ui", "mcp", "webhook"]
    assert live["pid"] == os.getpid()  # the live server runs in this process
    # Prometheus: one series for the process, so summing CPU counts it once.
    cpu = by_label(scraped, "zilean_process_cpu_percent", "service")
    assert cpu == {UP_LABEL: live["cpu_percent"]}
    assert by_label(scraped, "zilean_process_goroutines", "service") == {
        UP_LABEL: live["asyncio_tasks"]
    }
    assert by_label(scraped, "zilean_process_mem_sys_bytes", "service") == {
        UP_LABEL: live["rss_bytes"]
    }
    assert by_label(scraped, "zilean_process_mem_alloc_bytes", "service") == {
        UP_LABEL: live["anon_rss_bytes"]
    }
    # Each hosted service is still live in its own right.
    live_services = {entry["service"] for entry in health if entry["live"]}
    assert live_services == {str(service) for service in HTTP_SERVICES}


async def test_a_hosted_service_that_fails_its_own_health_check_is_not_live(
    database_url: str, engine: AsyncEngine, cast: Cast
) -> None:
    apps = build_apps(database_url, engine)

    async def broken(app: FastAPI) -> str | None:
        return "a check that fails"

    apps.mcp.state.health_checks.append(broken)
    secret = await create_token(apps.core, cast.carol.session, cast.role_ids["read_only"])
    with live_server(Origin(apps)) as base:
        async with httpx.AsyncClient(base_url=base, headers=bearer(secret)) as client:
            await eventually(lambda: live_sample(client, "core"), what="the start-up sample")
            health = (await client.get("/api/system/health")).json()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=apps.mcp), base_url="http://mcp"
        ) as client:
            mcp_health = await client.get("/healthz")
    live_services = {entry["service"] for entry in health if entry["live"]}
    assert live_services == {"core", "ui", "webhook"}
    assert await stored_samples(engine, Service.MCP) == []
    # The sample still says which services the process hosts.
    [(_, _, hosted)] = await measurements(engine, Service.CORE)
    assert hosted == ["core", "ui", "mcp", "webhook"]
    assert mcp_health.status_code == 503
    assert mcp_health.json() == {"error": "a check that fails"}


async def test_healthz_is_503_while_the_database_is_unreachable() -> None:
    url = f"postgresql://zilean@127.0.0.1:{free_port()}/none"
    settings = load_settings(Service.WEBHOOK, {"DATABASE_URL": url})
    app = create_webhook_app(settings, create_engine(settings.database_url))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        response = await client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"error": "the database is unreachable"}
    await app.state.engine.dispose()
