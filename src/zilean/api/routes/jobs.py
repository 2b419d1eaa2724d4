"""The job registry: every behaviour of a job is a row, validated on write."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.job_views import VIEW, JobView, visible_job
from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import raw_member
from zilean.registry import jobs as service
from zilean.registry.fields import JobWrite
from zilean.registry.job_patch import JobPatch
from zilean.registry.validation import RegistryContext

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

Reader = Annotated[Principal, Depends(require(Permission.JOBS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.JOBS_WRITE))]


def registry_context(request: Request) -> RegistryContext:
    return RegistryContext.of(request.app.state.settings)


Context = Annotated[RegistryContext, Depends(registry_context)]


async def as_written(job: JobWrite, request: Request) -> JobWrite:
    """`job` with its `body` text as the client wrote it, to be sent the same way."""
    return job.with_body_text(raw_member(await request.body(), "body"))


class UpdatedCount(ResponseModel):
    updated: int = Field(description="How many jobs changed.")


class WebhookInfo(ResponseModel):
    job_id: uuid.UUID
    webhook_token_hint: str | None
    webhook_token_rotated_at: datetime | None


class WebhookRotated(ResponseModel):
    id: uuid.UUID
    job_id: uuid.UUID
    webhook_token_hint: str | None
    webhook_token_rotated_at: datetime | None
    webhook_token: str = Field(description="Shown this once: only its digest is stored.")
    webhook_url: str


@router.get("", operation_id="list_jobs", response_model=list[JobView], **VIEW)
async def list_jobs(request: Request, context: Context, principal: Reader) -> list[dict[str, Any]]:
    """List every job, ordered by group and name."""
    async with request.app.state.engine.connect() as conn:
        return [visible_job(job, principal) for job in await service.list_jobs(conn, context)]


@router.post("", status_code=201, operation_id="create_job", response_model=JobView, **VIEW)
async def create_job(
    body: JobWrite, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    """Create a job. Script jobs also need jobs:script. A webhook job's token is returned
    here once, as `webhook_token` and `webhook_url`."""
    async with request.app.state.engine.begin() as conn:
        job = await service.create_job(
            conn, principal, actor_of(request, principal), context, await as_written(body, request)
        )
    return visible_job(job, principal)


@router.post("/enable-all", operation_id="enable_all_jobs")
async def enable_all(request: Request, principal: Writer) -> UpdatedCount:
    """Enable every job; returns how many changed."""
    async with request.app.state.engine.begin() as conn:
        count = await service.set_all_enabled(conn, actor_of(request, principal), True)
    return UpdatedCount(updated=count)


@router.post("/disable-all", operation_id="disable_all_jobs")
async def disable_all(request: Request, principal: Writer) -> UpdatedCount:
    """Disable every job; returns how many changed."""
    async with request.app.state.engine.begin() as conn:
        count = await service.set_all_enabled(conn, actor_of(request, principal), False)
    return UpdatedCount(updated=count)


@router.get("/{job_id}", operation_id="get_job", response_model=JobView, **VIEW)
async def get_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Reader
) -> dict[str, Any]:
    async with request.app.state.engine.connect() as conn:
        return visible_job(await service.get_job(conn, context, job_id), principal)


@router.put("/{job_id}", operation_id="replace_job", response_model=JobView, **VIEW)
async def replace_job(
    job_id: uuid.UUID, body: JobWrite, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    """Replace the whole job (no partial updates). `job_type` cannot change (409)."""
    async with request.app.state.engine.begin() as conn:
        job = await service.update_job(
            conn,
            principal,
            actor_of(request, principal),
            context,
            job_id,
            await as_written(body, request),
        )
    return visible_job(job, principal)


@router.patch(
    "/{job_id}",
    operation_id="patch_job",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/merge-patch+json": {
                    "schema": {"$ref": "#/components/schemas/JobPatch"}
                }
            }
        }
    },
    response_model=JobView,
    **VIEW,
)
async def patch_job(
    job_id: uuid.UUID, body: JobPatch, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    """Change only the fields given (a JSON merge patch, RFC 7386), validated as `PUT` is.

    A field left out keeps its value; a field set to `null` goes back to its default.
    `application/json` is accepted as well as `application/merge-patch+json`.
    """
    patch = body.model_dump(exclude_unset=True)
    body_text = raw_member(await request.body(), "body")
    async with request.app.state.engine.begin() as conn:
        job = await service.patch_job(
            conn, principal, actor_of(request, principal), context, job_id, patch, body_text
        )
    return visible_job(job, principal)


@router.delete("/{job_id}", status_code=204, operation_id="delete_job")
async def delete_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> Response:
    async with request.app.state.engine.begin() as conn:
        await service.delete_job(conn, actor_of(request, principal), context, job_id)
    return Response(status_code=204)


@router.post("/{job_id}/enable", operation_id="enable_job", response_model=JobView, **VIEW)
async def enable_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    async with request.app.state.engine.begin() as conn:
        job = await service.set_enabled(conn, actor_of(request, principal), context, job_id, True)
    return visible_job(job, principal)


@router.post("/{job_id}/disable", operation_id="disable_job", response_model=JobView, **VIEW)
async def disable_job(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> dict[str, Any]:
    async with request.app.state.engine.begin() as conn:
        job = await service.set_enabled(conn, actor_of(request, principal), context, job_id, False)
    return visible_job(job, principal)


@router.get("/{job_id}/webhook", operation_id="get_job_webhook")
async def get_webhook(job_id: uuid.UUID, request: Request, _: Reader) -> WebhookInfo:
    """The webhook token's hint and issue time; the token itself cannot be recovered."""
    async with request.app.state.engine.connect() as conn:
        return WebhookInfo.model_validate(await service.webhook_info(conn, job_id))


@router.post("/{job_id}/webhook/rotate", operation_id="rotate_job_webhook")
async def rotate_webhook(
    job_id: uuid.UUID, request: Request, context: Context, principal: Writer
) -> WebhookRotated:
    """Issue a new token (returned once); the old URL stops working immediately."""
    async with request.app.state.engine.begin() as conn:
        rotated = await service.rotate_webhook(conn, actor_of(request, principal), context, job_id)
    return WebhookRotated.model_validate(rotated)
