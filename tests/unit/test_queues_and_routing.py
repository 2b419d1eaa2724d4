from __future__ import annotations

import itertools

import pytest
from fastapi import FastAPI

from zilean.config import ScriptRuntime, Service, script_worker_service
from zilean.execution.queues import SERVICE_QUEUES, Queue
from zilean.jobkinds.definitions import UNROUTED_QUEUE, queue_for
from zilean.registry.kinds import JobType
from zilean.services.origin import OriginApps, route


def test_every_queue_has_exactly_one_consuming_service() -> None:
    for first, second in itertools.combinations(SERVICE_QUEUES.values(), 2):
        assert first.isdisjoint(second)
    consumed = set().union(*SERVICE_QUEUES.values())
    assert consumed == set(Queue)


def test_each_script_runtime_has_its_own_worker_and_queue() -> None:
    for runtime in ScriptRuntime:
        assert SERVICE_QUEUES[script_worker_service(runtime)] == {Queue(f"scripts-{runtime.value}")}
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


@pytest.mark.parametrize(
    ("job_type", "queue"),
    [
        ("http", "default"),
        ("bash", "scripts-bash"),
        ("javascript", "scripts-node"),  # JavaScript and TypeScript share the Node worker
        ("typescript", "scripts-node"),
        ("groovy", "scripts-groovy"),
        ("python", "scripts-python"),
        ("cobol", "unrouted"),  # unknown types go where nothing consumes them
    ],
)
def test_each_job_type_is_routed_to_its_workers_queue(job_type: str, queue: str) -> None:
    assert queue_for(job_type) == queue


def test_every_job_type_the_registry_accepts_has_a_consumed_queue() -> None:
    consumed = {str(q) for q in set().union(*SERVICE_QUEUES.values())}
    assert {queue_for(str(job_type)) for job_type in JobType} <= consumed
    assert UNROUTED_QUEUE not in consumed
