"""Send one HTTP job request and describe the result, with every recorded copy redacted.

Guarantees: the whole attempt (connect, send, wait, read) ends within `timeout_ms`;
redirects are never followed, so a 3xx is an ordinary non-success; a body is read only
up to `MAX_RESPONSE_BYTES` and a longer one fails the attempt rather than being cut,
since a truncated payload cannot be trusted for the loop path. Non-guarantee: the
target may have acted on a request whose attempt then timed out or failed while reading.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.http.request import ALLOWED_SCHEMES, HttpRequestSpec
from zilean.jobkinds.redaction import longest_form, redact

MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # 4 MiB, after content decoding
SNIPPET_CHARS = 500  # characters of response body kept in `last_call`
DEFAULT_EXEC_TIMEOUT_MS = 60_000  # used when a job's exec_timeout_ms is 0 or unset
KEEPALIVE_EXPIRY = 30.0  # seconds an idle pooled connection is kept
USER_AGENT = "Zilean"


@dataclass(frozen=True)
class CallOutcome:
    """A response that arrived and was read in full. `ok` is strictly 200 <= status < 300."""

    status_code: int
    body: bytes = field(repr=False)
    duration_ms: int
    ok: bool
    retry_after: str | None  # the Retry-After header verbatim, for the retry policy


def new_client(max_connections: int = 100, *, trust_env: bool = False) -> httpx.AsyncClient:
    """Return the client a worker shares across HTTP attempts.

    Redirects are off and only http and https are sent. `trust_env` (proxy variables,
    `.netrc`) is off by default so a job's request does not depend on the worker's
    environment; turn it on for workers that must reach targets through a proxy.
    """

    async def http_only(request: httpx.Request) -> None:
        if request.url.scheme not in ALLOWED_SCHEMES:
            raise httpx.UnsupportedProtocol(
                f"scheme {request.url.scheme!r} is not allowed (http and https only)",
                request=request,
            )

    return httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        ),
        timeout=httpx.Timeout(DEFAULT_EXEC_TIMEOUT_MS / 1000),
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
        trust_env=trust_env,
        event_hooks={"request": [http_only]},
    )


async def perform(
    client: httpx.AsyncClient, spec: HttpRequestSpec, *, timeout_ms: int
) -> CallOutcome:
    """Send `spec` once and read the response body in full.

    Return a `CallOutcome` for any response, 2xx or not (the caller decides on retries).
    Raise `CallError` (retryable) on a transport error, a body-read error, a body over
    `MAX_RESPONSE_BYTES`, or when `timeout_ms` runs out; its message is redacted and it
    keeps the status code when a response had started. A `timeout_ms` of 0 or less means
    `DEFAULT_EXEC_TIMEOUT_MS`.
    """
    if timeout_ms <= 0:
        timeout_ms = DEFAULT_EXEC_TIMEOUT_MS
    seconds = timeout_ms / 1000
    started = time.monotonic()
    status: int | None = None
    retry_after: str | None = None
    try:
        async with asyncio.timeout(seconds):
            request = client.build_request(
                spec.method,
                spec.url,
                headers=[(key.encode("ascii"), value.encode()) for key, value in spec.headers],
                content=spec.body,
                # httpx's own per-phase limits must not undercut the attempt's budget.
                timeout=seconds,
            )
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                status = response.status_code
                retry_after = response.headers.get("Retry-After")
                body = await _read_capped(response)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        raise CallError(
            f"attempt timed out after {timeout_ms} ms", status_code=status, retry_after=retry_after
        ) from None
    except CallError as exc:
        exc.retry_after = retry_after
        raise
    except httpx.InvalidURL as exc:
        raise PermanentCallError(redact(f"url cannot be sent: {exc}", spec.secrets)) from None
    except (httpx.HTTPError, UnicodeEncodeError) as exc:
        what = "reading the response failed" if status is not None else "request failed"
        detail = str(exc) or type(exc).__name__
        raise CallError(
            redact(f"{what}: {detail}", spec.secrets), status_code=status, retry_after=retry_after
        ) from None
    return CallOutcome(
        status_code=response.status_code,
        body=body,
        duration_ms=_elapsed_ms(started),
        ok=200 <= response.status_code < 300,
        retry_after=retry_after,
    )


async def _read_capped(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise CallError(
                f"response body exceeds {MAX_RESPONSE_BYTES} bytes (4 MiB)",
                status_code=response.status_code,
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def status_error(spec: HttpRequestSpec, outcome: CallOutcome) -> CallError | None:
    """Return the retryable error a non-2xx outcome stands for, or None for a success."""
    if outcome.ok:
        return None
    return CallError(
        f"endpoint returned status {outcome.status_code}: {snippet(outcome.body, spec.secrets)}",
        status_code=outcome.status_code,
        retry_after=outcome.retry_after,
    )


def snippet(body: bytes, secrets: frozenset[str]) -> str:
    """Return the first `SNIPPET_CHARS` characters of `body` as text, redacted."""
    # Redact a window long enough to hold a secret that straddles the cut, then cut.
    window = SNIPPET_CHARS + longest_form(secrets)
    text = body[: window * 4].decode("utf-8", errors="replace")[:window]
    return redact(text, secrets)[:SNIPPET_CHARS]


def last_call(
    spec: HttpRequestSpec, result: CallOutcome | CallError, duration_ms: int
) -> dict[str, Any]:
    """Return the `last_call` record of an attempt: what was sent and what came back."""
    if isinstance(result, CallOutcome):
        status_code: int | None = result.status_code
        body = result.body
    else:
        status_code, body = result.status_code, b""
    return {
        "method": spec.method,
        "url": redact(spec.url, spec.secrets),
        "status_code": status_code,
        "duration_ms": duration_ms,
        "response_snippet": snippet(body, spec.secrets),
    }
