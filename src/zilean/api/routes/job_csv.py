"""Jobs as CSV: the import template, the streaming import and the export.

Mounted before the jobs router, whose `/api/jobs/{job_id}` would otherwise claim
`/api/jobs/import` and `/api/jobs/export`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile
from starlette.types import Message

from zilean.api.access import actor_of
from zilean.api.routes.jobs import Context, Reader, Writer
from zilean.auth.permissions import Permission
from zilean.errors import ApiError, InvalidInput
from zilean.jobkinds.definitions import JobType
from zilean.registry import csv_export, csv_import
from zilean.registry.csv_import import Collision, ImportRun, MergePriority, Tally
from zilean.schedules import ScheduleType

router = APIRouter(prefix="/api/jobs", tags=["jobs"])
# The import reads (and caps) its own body: see `_read_body`.
IMPORT_PATH = "/api/jobs/import"

NDJSON = "application/x-ndjson"
# Room for the multipart envelope and the two option fields around the file itself.
MAX_REQUEST_BYTES = csv_import.MAX_UPLOAD_BYTES + 64 * 1024


class UploadTooLarge(ApiError):
    """the CSV file must be at most 5 MiB"""

    status_code = 413


_CSV_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}}
}
_IMPORT_FORM: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "on_collision": {
                            "type": "string",
                            "enum": [str(mode) for mode in Collision],
                            "default": str(csv_import.DEFAULT_COLLISION),
                        },
                        "merge_priority": {
                            "type": "string",
                            "enum": [str(priority) for priority in MergePriority],
                            "default": str(csv_import.DEFAULT_MERGE_PRIORITY),
                        },
                    },
                }
            }
        },
    }
}


def _csv_file(text: str, filename: str) -> Response:
    return Response(
        text,
        media_type=csv_export.MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get(
    "/import/template",
    operation_id="download_job_import_template",
    response_class=Response,
    responses=_CSV_RESPONSE,
)
async def download_template(_: Writer) -> Response:
    """Download a CSV whose header names every column the import accepts, with one example
    row that imports cleanly. Objects and arrays are JSON text, booleans `true`/`false`,
    and an empty cell means the field's default."""
    return _csv_file(csv_export.template_csv(), csv_export.TEMPLATE_FILENAME)


EXPORT_STATES = ("enabled", "disabled")


def _choice(name: str, value: str | None, allowed: Iterable[str]) -> str | None:
    """`value` when it is one of `allowed`; None when empty; a 400 naming the choices else."""
    if not value:
        return None
    choices = tuple(allowed)
    if value not in choices:
        raise InvalidInput(f"{name}: must be one of {', '.join(choices)}")
    return value


@router.get("/export", operation_id="export_jobs", response_class=Response, responses=_CSV_RESPONSE)
async def export_jobs(
    request: Request,
    context: Context,
    principal: Reader,
    group: str | None = None,
    job_type: str | None = None,
    schedule_type: str | None = None,
    state: str | None = None,
    search: str | None = None,
) -> Response:
    """Download the jobs as CSV in the template's columns: every job, or those the jobs
    list's filters keep (`group` with its subgroups, `job_type`, `schedule_type`, `state`
    `enabled` or `disabled`, `search` in name, group or URL). Auth secrets are left out, so
    importing the file back with `on_collision=overwrite` keeps each job's stored secret."""
    where = csv_export.ExportFilter(
        group=group.strip("/") or None if group else None,
        job_type=_choice("job_type", job_type, (str(t) for t in JobType)),
        schedule_type=_choice("schedule_type", schedule_type, (str(t) for t in ScheduleType)),
        state=_choice("state", state, EXPORT_STATES),
        search=search.strip() or None if search else None,
    )
    async with request.app.state.engine.connect() as conn:
        text = await csv_export.export_csv(
            conn, context, show_notify=principal.can(Permission.NOTIFY_READ), where=where
        )
    return _csv_file(text, csv_export.EXPORT_FILENAME)


async def _read_body(request: Request) -> bytes:
    """Read the request body, refusing it (413) as soon as it outgrows the cap."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
        raise UploadTooLarge()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_REQUEST_BYTES:
            raise UploadTooLarge()
    return bytes(body)


async def _read_upload(request: Request) -> tuple[bytes, Collision, MergePriority]:
    body = await _read_body(request)

    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    # The form is parsed from the capped copy, never from an unbounded stream.
    async with Request(request.scope, replay).form(max_files=1, max_fields=8) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput("file is required (a multipart upload of the CSV)")
        data = await upload.read()
        on_collision = form.get("on_collision")
        merge_priority = form.get("merge_priority")
    if len(data) > csv_import.MAX_UPLOAD_BYTES:
        raise UploadTooLarge()
    return (
        data,
        csv_import.parse_choice(
            "on_collision",
            on_collision if isinstance(on_collision, str) else None,
            Collision,
            csv_import.DEFAULT_COLLISION,
        ),
        csv_import.parse_choice(
            "merge_priority",
            merge_priority if isinstance(merge_priority, str) else None,
            MergePriority,
            csv_import.DEFAULT_MERGE_PRIORITY,
        ),
    )


@router.post(
    "/import",
    operation_id="import_jobs",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}}}},
    openapi_extra=_IMPORT_FORM,
)
async def import_jobs(request: Request, context: Context, principal: Writer) -> StreamingResponse:
    """Create or update jobs from an uploaded CSV (UTF-8, at most 5 MiB).

    A row matches an existing job on `group_name` + `name`. `on_collision` decides what a
    match does: `overwrite` replaces the job with the row, `skip` leaves it, and `merge`
    combines them, where `merge_priority` (`source`: the row, `target`: the job) wins for
    fields both sides set and a blank cell never clears a value. Every row meets the same
    validation and permissions as `POST`/`PUT /api/jobs` and commits on its own.

    The response is newline-delimited JSON, one line per data row as soon as it is done:
    `{"row", "status": "created"|"updated"|"skipped"|"error", "job_id", "name",
    "group_name", "error"}` (plus `webhook_token` and `webhook_url` when the row issued a
    webhook token), then `{"summary": {"created", "updated", "skipped", "errors"}}`.
    """
    data, on_collision, merge_priority = await _read_upload(request)
    rows = csv_import.read_csv(data)
    run = ImportRun(
        principal=principal,
        actor=actor_of(request, principal),
        context=context,
        on_collision=on_collision,
        merge_priority=merge_priority,
    )

    async def lines() -> AsyncIterator[str]:
        tally = Tally()
        async for result in csv_import.import_rows(request.app.state.engine, rows, run):
            tally.add(result)
            yield json.dumps(result.public()) + "\n"
        yield json.dumps({"summary": tally.public()}) + "\n"

    return StreamingResponse(lines(), media_type=NDJSON)
