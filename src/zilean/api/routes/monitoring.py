"""Process metrics, system health, and script worker liveness and status."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from zilean.api.access import require
from zilean.api.routes.activity import Buckets, Since
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import ScriptRuntime
from zilean.db.engine import driver_connection
from zilean.execution.queues import JOB_TYPE_QUEUES, RUNTIME_QUEUES
from zilean.monitoring.activity import worker_invocations
from zilean.monitoring.samples import (
    SERVICES,
    last_seen,
    latest_sample,
    parse_service,
    sample_history,
    system_health,
)
from zilean.monitoring.script_workers import worker_statuses
from zilean.monitoring.window import Window

router = APIRouter(tags=["monitoring"])

MetricsReader = Annotated[Principal, Depends(require(Permission.METRICS_READ))]
ScriptAuthor = Annotated[Principal, Depends(require(Permission.JOBS_SCRIPT))]
VolumesReader = Annotated[Principal, Depends(require(Permission.SCRIPTVOLUMES_READ))]
ServiceParam = Annotated[
    str | None,
    Query(description="A service label such as worker, core or script-worker-bash; "
          "empty means worker."),
]  # fmt: skip
# Which runtime's worker runs each script job type.
SCRIPT_JOB_RUNTIMES: dict[str, ScriptRuntime] = {
    job_type: runtime
    for job_type, queue in JOB_TYPE_QUEUES.items()
    for runtime, runtime_queue in RUNTIME_QUEUES.items()
    if queue == runtime_queue
}


@router.get("/api/metrics/live", operation_id="get_live_metrics")
async def live_metrics(
    request: Request, _: MetricsReader, service: ServiceParam = None
) -> dict[str, Any] | None:
    """The service's latest process sample, or `null` when it has never sampled."""
    label = parse_service(service)
    assert label is not None
    async with request.app.state.engine.connect() as conn:
        return await latest_sample(conn, label)


@router.get("/api/metrics/history", operation_id="get_metrics_history")
async def metrics_history(
    request: Request,
    _: MetricsReader,
    since: Since = None,
    buckets: Buckets = None,
    service: Annotated[
        str | None, Query(description="A service label, or `all` for every service.")
    ] = None,
) -> dict[str, Any]:
    """Process samples averaged per display slot (CPU and RSS also at their peak).

    `service=all` answers `samples_by_service` keyed by label, plus the worker-wide
    `invocations` series summed across every job.
    """
    window = Window.from_query(since, buckets)
    label = parse_service(service, allow_all=True)
    services = SERVICES if label is None else (label,)
    async with request.app.state.engine.connect() as conn:
        window_start, series = await sample_history(conn, window, services)
        if label is not None:
            return {**window.geometry(window_start), "service": label, "samples": series[label]}
        invocations = await worker_invocations(conn, window)
    return {
        **window.geometry(window_start),
        "samples_by_service": {str(s): samples for s, samples in series.items()},
        "invocations": invocations,
    }


@router.get("/api/system/health", operation_id="get_system_health")
async def health(request: Request, _: MetricsReader) -> list[dict[str, Any]]:
    """Every service: live when it stored a sample in the last 2 minutes."""
    async with request.app.state.engine.connect() as conn:
        return await system_health(conn)


@router.get("/api/scripts/liveness", operation_id="get_script_liveness")
async def script_liveness(request: Request, _: ScriptAuthor) -> dict[str, Any]:
    """Per script job type, whether the worker that runs it sampled in the last 2 minutes."""
    services = tuple(runtime.service for runtime in ScriptRuntime)
    async with request.app.state.engine.connect() as conn:
        seen = await last_seen(conn, services)
    return {job_type: seen[runtime.service] for job_type, runtime in SCRIPT_JOB_RUNTIMES.items()}


@router.get("/api/script-workers/status", operation_id="get_script_worker_status")
async def script_worker_status(request: Request, _: VolumesReader) -> list[dict[str, Any]]:
    """Per script queue that has reported: its sandbox and volumes-root checks, and staleness."""
    async with request.app.state.engine.connect() as conn:
        return await worker_statuses(await driver_connection(conn))
