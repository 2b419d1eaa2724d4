"""`POST /api/webhooks/{job_id}/{token}`: fire a webhook-scheduled job with the call's body.

The checks run in an order that reveals nothing about which jobs exist: first those on the
request alone (rate, Content-Type, size), then the lookup, whose every failure is one 404,
and only for a caller holding a valid URL the hop limit and the overlap lock. The lookup
does the same work whether or not the job exists: one indexed read, one digest, one
constant-time comparison. The body is never logged or echoed, only its size and digest.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import UTC, datetime

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.body_limit import too_large_message
from zilean.api.errors import error_response
from zilean.auth.tokens import digest
from zilean.config import WebhookSettings
from zilean.execution.firing import fire
from zilean.execution.payload import Trigger
from zilean.execution.webhook_context import webhook_metadata
from zilean.jobkinds.http.request import WEBHOOK_HOPS_HEADER
from zilean.registry.jobs import WEBHOOK_PATH
from zilean.registry.webhook_targets import WebhookTarget, find_webhook_target
from zilean.ui.ratelimit import RateLimiter, client_key

log = structlog.get_logger(__name__)

router = APIRouter()

MAX_BODY_BYTES = 256 * 1024
HOP_LIMIT = 8  # a call arriving with this many hops or more is refused
MAX_HEADER_TEXT = 256  # characters of Content-Type or event name carried to the job
# Where a sender names the event, most specific first; absent everywhere, the event is "".
EVENT_HEADERS = ("X-Zilean-Event", "X-GitHub-Event", "X-Gitlab-Event", "X-Event-Key")

NOT_FOUND = "webhook not found"
HOP_LIMIT_EXCEEDED = "webhook hop limit exceeded"
RUN_IN_PROGRESS = "run in progress: a previous call to this job is still running; retry later"
NOT_JSON = "the request must have a JSON Content-Type, such as application/json"
NOT_UTF8 = "the request body must be UTF-8 encoded JSON"
TOO_MANY = "too many webhook calls from this address; retry later"

_NO_JOB = uuid.UUID(int=0)  # looked up in place of a malformed id: a miss costs a query too
_NO_DIGEST = bytes(32)  # compared in place of a missing token digest


def is_json_media_type(content_type: str) -> bool:
    """True for `application/json` and any `+json` type, parameters (charset) aside."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def inbound_hops(value: str | None) -> int:
    """The hop count a caller sent; absent or not a plain non-negative integer counts as 0."""
    text = (value or "").strip()
    return int(text) if text.isascii() and text.isdigit() else 0


def _header_text(value: str | None) -> str:
    """A header's value fit to reach a job: printable, trimmed and bounded."""
    text = (value or "").strip()[:MAX_HEADER_TEXT]
    return text if text.isprintable() else ""


def _event(request: Request) -> str:
    for name in EVENT_HEADERS:
        event = _header_text(request.headers.get(name))
        if event:
            return event
    return ""


def _parse_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


async def _read_body(request: Request) -> bytes | None:
    """The body, or None once it passes the cap (declared or as it arrives)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def _matches(target: WebhookTarget | None, job_id: uuid.UUID | None, token: str) -> bool:
    """Whether the URL names a job its webhook may fire, with the same work on every path."""
    stored = target.token_digest if target and target.token_digest else _NO_DIGEST
    same = hmac.compare_digest(digest(token), stored)
    return same and job_id is not None and target is not None and target.fireable


@router.post(WEBHOOK_PATH, status_code=202)
async def receive_webhook(request: Request, job_id: str, token: str) -> JSONResponse:
    """Fire the job with this call's body; 202 with the call's request id."""
    settings: WebhookSettings = request.app.state.settings
    engine: AsyncEngine = request.app.state.engine
    limiter: RateLimiter = request.app.state.webhook_limiter
    client = client_key(request, trust_proxy_headers=settings.trust_proxy_headers)
    if not limiter.allow(client):
        response = error_response(429, TOO_MANY)
        response.headers["Retry-After"] = str(max(1, limiter.retry_after(client)))
        return response

    content_type = _header_text(request.headers.get("content-type"))
    if not is_json_media_type(content_type):
        return error_response(415, NOT_JSON)
    body = await _read_body(request)
    if body is None:
        return error_response(413, too_large_message(MAX_BODY_BYTES))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return error_response(400, NOT_UTF8)

    parsed = _parse_id(job_id)
    described = {
        "job_id": str(parsed) if parsed else None,
        "size": len(body),
        "content_type": content_type,
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    async with engine.begin() as conn:
        target = await find_webhook_target(conn, parsed or _NO_JOB)
        if not _matches(target, parsed, token):
            log.info("webhook call refused: no such job", action="webhook.not_found", **described)
            return error_response(404, NOT_FOUND)
        assert parsed is not None
        hops = inbound_hops(request.headers.get(WEBHOOK_HOPS_HEADER))
        if hops >= HOP_LIMIT:
            log.warning(
                "webhook call refused: hop limit reached",
                action="webhook.hop_limit", hops=hops, **described,
            )  # fmt: skip
            return error_response(508, HOP_LIMIT_EXCEEDED)
        # Again, locked: a disable or rotation committed since the first read wins.
        if not _matches(await find_webhook_target(conn, parsed, lock=True), parsed, token):
            return error_response(404, NOT_FOUND)
        request_id = str(uuid.uuid4())
        received_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        metadata = webhook_metadata(
            event=_event(request),
            content_type=content_type,
            request_id=request_id,
            received_at=received_at,
            job_id=str(parsed),
        )
        firing = await fire(
            conn,
            parsed,
            trigger=Trigger.WEBHOOK,
            webhook_hops=hops,
            webhook_payload=text,
            webhook_metadata=metadata,
        )
    if not firing.fired:
        log.info("webhook call refused: still running", action="webhook.busy", **described)
        return error_response(409, RUN_IN_PROGRESS)
    log.info(
        "webhook call accepted",
        action="webhook.accepted",
        request_id=request_id,
        hops=hops,
        queued=len(firing.queue_job_ids),
        **described,
    )
    return JSONResponse({"request_id": request_id}, status_code=202)
