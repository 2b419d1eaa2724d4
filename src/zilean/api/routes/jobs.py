"""The job registry: every behaviour of a job is a row, validated on write."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from zilean.api.access import actor_of, require
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import CoreSettings
from zilean.crypto.secretbox import SecretBox
from zilean.registry import jobs as service
from zilean.registry.fields import JobWrite
from zilean.registry.kinds import NOTIFY_FIELDS
from zilean.registry.validation import RegistryContext

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

Reader = Annotated[Principal, Depends(require(Permission.JOBS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.JOBS_WRITE))]


def registry_context(request: Request) -> RegistryContext:
    settings: CoreSettings = request.app.state.settings
    return RegistryContext(
        box=SecretBox(settings.settings_encryption_key),
        default_timezone=settings.timezone,
        public_base_url=settings.public_base_url,
    )


Context = Annotated[RegistryContext, Depends(registry_context)]


def visible(job: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """Hide a job's notify config from callers without notify:read."""
    if principal.can(Permission.NOTIFY_READ):
        return job
    return {key: value for key, value in job.items() if key not in NOTIFY_FIELDS}


@router.get("", operation_id="list_jobs")
async def list_jobs(request: Request, context: Context, principal: Reader) -> list[dict[str, Any]]:
    """List every job, ordered by group and name."""
    async with request.app.state.engine.connect() as conn:
        return [visible(job, principal) for job in await service.list_jobs(conn, context)]


@router.post("", status_code=201, operation_id="create_job")
async def create_job(
    body: JobWrite, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    """Create a job. Script jobs also need jobs:script. A webhook job's token is returned
    here once, as `webhook_token` and `webhook_url`."""
    async with request.app.state.engine.begin() as conn:
        job = await service.create_job(conn, principal, actor_of(request, principal), context, body)
    return visible(job, principal)


@router.post("/enable-all", operation_id="enable_all_jobs")
async def enable_all(request: Request, principal: Writer) -> dict[str, int]:
    """Enable every job; returns how many changed."""
    async with request.app.state.engine.begin() as conn:
        count = await service.set_all_enabled(conn, actor_of(request, principal), True)
    return {"updated": count}


@router.post("/disable-all", operation_id="disable_all_jobs")
async def disable_all(request: Request, principal: Writer) -> dict[str, int]:
    """Disable every job; returns how many changed."""
    async with request.app.state.engine.begin() as conn:
        count = await service.set_all_enabled(conn, actor_of(request, principal), False)
    return {"updated": count}


@router.get("/{job_id}", operation_id="get_job")
async def get_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Reader
) -> dict[str, Any]:
    async with request.app.state.engine.connect() as conn:
        return visible(await service.get_job(conn, context, job_id), principal)


@router.put("/{job_id}", operation_id="replace_job")
async def replace_job(
    job_id: uuid.UUID, body: JobWrite, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    """Replace the whole job (no partial updates). `job_type` cannot change (409)."""
    async with request.app.state.engine.begin() as conn:
        job = await service.update_job(
            conn, principal, actor_of(request, principal), context, job_id, body
        )
    return visible(job, principal)


@router.delete("/{job_id}", status_code=204, operation_id="delete_job")
async def delete_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> Response:
    async with request.app.state.engine.begin() as conn:
        await service.delete_job(conn, actor_of(request, principal), context, job_id)
    return Response(status_code=204)


@router.post("/{job_id}/enable", operation_id="enable_job")
async def enable_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    async with request.app.state.engine.begin() as conn:
        job = await service.set_enabled(conn, actor_of(request, principal), context, job_id, True)
    return visible(job, principal)


@router.post("/{job_id}/disable", operation_id="disable_job")
async def disable_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    async with request.app.state.engine.begin() as conn:
        return await service.set_enabled(conn, actor_of(request, principal), context, job_id, False)


@router.get("/{job_id}/webhook", operation_id="get_job_webhook")
async def get_webhook(job_id: uuid.UUID, request: Request, _: Reader) -> dict[str, Any]:
    """The webhook token's hint and issue time; the token itself cannot be recovered."""
    async with request.app.state.engine.connect() as conn:
        return await service.webhook_info(conn, job_id)


@router.post("/{job_id}/webhook/rotate", operation_id="rotate_job_webhook")
async def rotate_webhook(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    """Issue a new token (returned once); the old URL stops working immediately."""
    async with request.app.state.engine.begin() as conn:
        return await service.rotate_webhook(conn, actor_of(request, principal), context, job_id)
