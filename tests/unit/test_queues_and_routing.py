from __future__ import annotations

import itertools

import pytest
from fastapi import FastAPI

from zilean.config import ScriptRuntime, Service
from zilean.execution.queues import SERVICE_QUEUES, Queue
from zilean.services.origin import OriginApps, route


def test_every_queue_has_exactly_one_consuming_service() -> None:
    for first, second in itertools.combinations(SERVICE_QUEUES.values(), 2):
        assert first.isdisjoint(second)
    consumed = set().union(*SERVICE_QUEUES.values())
    assert consumed == set(Queue)


def test_each_script_runtime_has_its_own_worker_and_queue() -> None:
    for runtime in ScriptRuntime:
        assert SERVICE_QUEUES[runtime.service] == {Queue(f"scripts-{runtime.value}")}
    assert SERVICE_QUEUES[Service.WORKER] == {Queue.DEFAULT}


APPS = OriginApps(
    core=FastAPI(title="core"),
    ui=FastAPI(title="ui"),
    mcp=FastAPI(title="mcp"),
    webhook=FastAPI(title="webhook"),
)


@pytest.mark.parametrize(
    ("path", "service"),
    [
        ("/api/jobs", "core"),
        ("/api", "core"),
        ("/prometheus/metrics", "core"),
        ("/api/webhooks/abc/token", "webhook"),  # must win over the /api/* rule
        ("/mcp", "mcp"),
        ("/mcp/", "mcp"),
        ("/login", "ui"),
        ("/admin/assets/app.js", "ui"),
        ("/queue", "ui"),
        ("/", "ui"),
        ("/apiary", "ui"),  # a prefix match on the word alone is not the API
        ("/healthz", "ui"),
    ],
)
def test_the_origin_routes_paths_like_the_reference_proxy(path: str, service: str) -> None:
    assert route(APPS, path).title == service
