"""Process metrics, system health, and script worker liveness and status."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field, create_model

from zilean.api.access import require
from zilean.api.responses import ResponseModel
from zilean.api.routes.activity import Buckets, CallBucket, Since, WindowGeometry
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import ScriptRuntime, Service, script_worker_service
from zilean.db.engine import driver_connection
from zilean.jobkinds.definitions import JOB_KINDS
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
    str(kind.job_type): kind.runtime for kind in JOB_KINDS.values() if kind.runtime is not None
}


class LiveSample(ResponseModel):
    """One process sample, taken once a minute by every process under its service label."""

    service: Service
    sampled_at: datetime
    hostname: str
    pid: int
    cpu_percent: float = Field(description="Since the previous sample; 100 is one full core.")
    rss_bytes: int
    anon_rss_bytes: int | None = Field(
        description="Resident memory not backed by a file; null on samples older than it."
    )
    python_allocated_blocks: int
    threads: int
    asyncio_tasks: int
    open_fds: int
    process_services: list[Service] = Field(
        description="Every service the sampled process hosts (one sample serves them all)."
    )


class SampleSlot(ResponseModel):
    """A display slot's samples, averaged (CPU and RSS also at their peak)."""

    bucket_start: datetime
    sample_count: int
    cpu_percent: float
    cpu_percent_max: float
    rss_bytes: int
    rss_bytes_max: int
    anon_rss_bytes: int | None
    python_allocated_blocks: int
    threads: float
    asyncio_tasks: float
    open_fds: float


class ServiceHistory(WindowGeometry):
    service: Service
    samples: list[SampleSlot] = Field(description="Only slots with samples are listed.")


def keyed(name: str, keys: Iterable[str], value: Any) -> type[ResponseModel]:
    """A model with one required field per key: a map whose keys are all known, and always
    all present, so the schema can list them (labels such as `script-worker-bash` included)."""
    fields: dict[str, Any] = dict.fromkeys(keys, (value, ...))
    return create_model(name, __base__=ResponseModel, **fields)


SamplesByService = keyed("SamplesByService", map(str, SERVICES), list[SampleSlot])


class AllServicesHistory(WindowGeometry):
    samples_by_service: SamplesByService  # type: ignore[valid-type]
    invocations: list[CallBucket] = Field(description="Every job's attempts, summed per slot.")


class Liveness(ResponseModel):
    live: bool = Field(description="A sample was stored in the last 2 minutes.")
    last_sample_at: datetime | None = Field(description="Null when it has never sampled.")


class ServiceHealth(Liveness):
    service: Service


ScriptLiveness = keyed("ScriptLiveness", SCRIPT_JOB_RUNTIMES, Liveness)


class ScriptWorkerStatus(ResponseModel):
    queue: str
    sandbox_enforced: bool = Field(
        description="Scripts run confined by bubblewrap: enabled, installed and working."
    )
    volumes_root_mounted: bool = Field(
        description="The volumes root is set, a directory other than /, and writable."
    )
    updated_at: datetime = Field(description="When the worker last reported (every minute).")
    stale: bool = Field(description="No report for more than 3 minutes.")


@router.get("/api/metrics/live", operation_id="get_live_metrics")
async def live_metrics(
    request: Request, _: MetricsReader, service: ServiceParam = None
) -> LiveSample | None:
    """The service's latest process sample, or `null` when it has never sampled."""
    label = parse_service(service)
    assert label is not None
    async with request.app.state.engine.connect() as conn:
        sample = await latest_sample(conn, label)
    return None if sample is None else LiveSample.model_validate(sample)


@router.get("/api/metrics/history", operation_id="get_metrics_history")
async def metrics_history(
    request: Request,
    _: MetricsReader,
    since: Since = None,
    buckets: Buckets = None,
    service: Annotated[
        str | None, Query(description="A service label, or `all` for every service.")
    ] = None,
) -> ServiceHistory | AllServicesHistory:
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
            return ServiceHistory.model_validate(
                {**window.geometry(window_start), "service": label, "samples": series[label]}
            )
        invocations = await worker_invocations(conn, window)
    return AllServicesHistory.model_validate(
        {
            **window.geometry(window_start),
            "samples_by_service": {str(s): samples for s, samples in series.items()},
            "invocations": invocations,
        }
    )


@router.get("/api/system/health", operation_id="get_system_health")
async def health(request: Request, _: MetricsReader) -> list[ServiceHealth]:
    """Every service: live when it stored a sample in the last 2 minutes."""
    async with request.app.state.engine.connect() as conn:
        services = await system_health(conn)
    return [ServiceHealth.model_validate(entry) for entry in services]


@router.get(
    "/api/scripts/liveness", operation_id="get_script_liveness", response_model=ScriptLiveness
)
async def script_liveness(request: Request, _: ScriptAuthor) -> dict[str, Any]:
    """Per script job type, whether the worker that runs it sampled in the last 2 minutes."""
    services = tuple(script_worker_service(runtime) for runtime in ScriptRuntime)
    async with request.app.state.engine.connect() as conn:
        seen = await last_seen(conn, services)
    return {
        job_type: seen[script_worker_service(runtime)]
        for job_type, runtime in SCRIPT_JOB_RUNTIMES.items()
    }


@router.get("/api/script-workers/status", operation_id="get_script_worker_status")
async def script_worker_status(request: Request, _: VolumesReader) -> list[ScriptWorkerStatus]:
    """Per script queue that has reported: its sandbox and volumes-root checks, and staleness."""
    async with request.app.state.engine.connect() as conn:
        statuses = await worker_statuses(await driver_connection(conn))
    return [ScriptWorkerStatus.model_validate(status) for status in statuses]
