"""The failure callback: one best-effort POST when a run fails for good.

Sent after the attempt is recorded, to the job's `on_failure_url` or else the worker's
`ZILEAN_ON_FAILURE_URL`. Never retried, never sent for a success, and a callback that
fails is only logged (it never triggers a callback about itself). Callbacks run in the
background so they never hold up the queue; `Callbacks.settle` waits for those in flight.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from zilean.jobkinds.http.call import request_target
from zilean.jobkinds.http.request import ALLOWED_SCHEMES

log = structlog.get_logger(__name__)

CALLBACK_TIMEOUT = 10.0  # seconds for the whole POST, connect to response headers


@dataclass(frozen=True)
class FailureReport:
    """The callback's body. `last_error` is already redacted."""

    job_id: str
    name: str
    attempts: int
    last_error: str | None
    status_code: int | None

    def body(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "name": self.name,
            "status": "failed",
            "attempts": self.attempts,
            "last_error": self.last_error,
            "status_code": self.status_code,
        }


class Callbacks:
    """Sends failure callbacks without making the attempt wait for them."""

    def __init__(self, client: aiohttp.ClientSession, default_url: str | None) -> None:
        self._client = client
        self._default_url = default_url
        self._in_flight: set[asyncio.Task[None]] = set()

    def url_for(self, job_url: str | None) -> str | None:
        """Return where a job's failure goes: its own URL, else the worker-wide one."""
        return (job_url or "").strip() or self._default_url

    def send(self, url: str, report: FailureReport) -> None:
        """Start the POST in the background; it is never retried."""
        task = asyncio.create_task(self._post(url, report))
        # The loop keeps only weak references to tasks: hold one until it finishes.
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def settle(self) -> None:
        """Wait for every callback in flight (tests, and a worker that is stopping)."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _post(self, url: str, report: FailureReport) -> None:
        try:
            status = await self._send(url, report)
        except Exception as exc:  # a background task: nothing above it would see the error
            log.warning(
                "failure callback could not be sent",
                action="callback.failed",
                job_id=report.job_id,
                error=type(exc).__name__,
            )
            return
        if not 200 <= status < 300:
            log.warning(
                "failure callback was refused",
                action="callback.refused",
                job_id=report.job_id,
                status_code=status,
            )
            return
        log.info("failure callback sent", action="callback.sent", job_id=report.job_id)

    async def _send(self, url: str, report: FailureReport) -> int:
        """POST the report once and return the response status; a redirect is a refusal."""
        target, userinfo_auth = request_target(url)
        if target.scheme not in ALLOWED_SCHEMES:
            raise aiohttp.NonHttpUrlClientError(target)
        headers = {"Content-Type": "application/json"}
        if userinfo_auth is not None:
            headers["Authorization"] = userinfo_auth
        # Compact UTF-8 JSON, byte for byte what httpx sent.
        body = json.dumps(report.body(), ensure_ascii=False, separators=(",", ":"))
        async with (
            asyncio.timeout(CALLBACK_TIMEOUT),
            self._client.post(
                target, data=body.encode(), headers=headers, allow_redirects=False
            ) as response,
        ):
            # The body is never read: an unread one closes the connection instead of
            # pooling it, which is cheaper than reading whatever the endpoint sends back.
            return response.status
