"""Send one HTTP job request and describe the result, with every recorded copy redacted.

Guarantees: the whole attempt (connect, send, wait, read) ends within `timeout_ms`;
redirects are never followed, so a 3xx is an ordinary non-success; a body is read only
up to `MAX_RESPONSE_BYTES` and a longer one fails the attempt rather than being cut,
since a truncated payload cannot be trusted for the loop path. Non-guarantee: the
target may have acted on a request whose attempt then timed out or failed while reading.

On the wire the request is the spec: its method, its URL as written (see `request.wire_url`),
its headers in order with their spelling and duplicates, its body. The client adds only
`Host`, `Accept`, `Accept-Encoding`, `User-Agent: Zilean` (unless the job sets one) and
the body's framing; never a `Content-Type`, and never a cookie, since the shared
session keeps none. These are the headers httpx, the previous client, sent, less its
`Connection: keep-alive` (HTTP/1.1 keeps the connection open without it).
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import certifi
from yarl import URL

from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.http.request import ALLOWED_SCHEMES, HttpRequestSpec, wire_url
from zilean.jobkinds.redaction import Secrets

MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # 4 MiB, after content decoding
SNIPPET_CHARS = 500  # characters of response body kept in `last_call`
DEFAULT_EXEC_TIMEOUT_MS = 60_000  # used when a job's exec_timeout_ms is 0 or unset
KEEPALIVE_EXPIRY = 30.0  # seconds an idle pooled connection is kept
READ_CHUNK = 64 * 1024  # bytes asked for per read of a response body
# bytes; h11 (httpx's parser) took any response head up to 16 KiB, aiohttp caps each
# line at 8 KiB by default: raise it so that no response httpx read is refused now.
MAX_HEAD_LINE = 16 * 1024
MAX_RESPONSE_HEADERS = 1024  # header lines; aiohttp's default of 128 is below what h11 took
USER_AGENT = "Zilean"
# What `_Decoder` undoes, advertised explicitly: aiohttp's own default grows with the
# optional packages installed (br with Brotli, zstd with backports.zstd).
ACCEPT_ENCODING = "gzip, deflate"
_INFLATED = frozenset({"gzip", "deflate"})  # the codings `_Decoder` undoes

# httpx sent `Content-Length: 0` without a body only for these; aiohttp adds it to every
# method outside GET, HEAD, OPTIONS and TRACE (DELETE, say), so the others drop it.
_EMPTY_LENGTH_METHODS = frozenset({"POST", "PUT", "PATCH"})
# aiohttp labels a body without a Content-Type `application/octet-stream`; the job's
# request must carry only the Content-Type the job gave it.
_SKIP_AUTO_HEADERS = ("Content-Type",)


@dataclass(frozen=True)
class CallOutcome:
    """A response that arrived and was read in full. `ok` is strictly 200 <= status < 300."""

    status_code: int
    body: bytes = field(repr=False)
    duration_ms: int
    ok: bool
    retry_after: str | None  # the Retry-After header verbatim, for the retry policy


def new_client(max_connections: int = 100, *, trust_env: bool = False) -> aiohttp.ClientSession:
    """Return the session a worker shares across HTTP attempts and failure callbacks.

    Call it from inside the worker's running event loop: aiohttp binds the session to
    that loop. Close it with `await session.close()` (or use it as `async with`).

    Its pool holds up to `max_connections` connections and keeps an idle one for
    `KEEPALIVE_EXPIRY` seconds. It keeps no cookies, so one job's `Set-Cookie` never
    reaches another job's request, and sets no timeouts: `perform` bounds each attempt
    as a whole. TLS trusts certifi's roots, as httpx did. `trust_env` (proxy variables,
    `.netrc`, `SSL_CERT_FILE` and `SSL_CERT_DIR`) is off by default so a job's request
    does not depend on the worker's environment; turn it on for workers that must reach
    targets through a proxy.
    """
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        keepalive_timeout=KEEPALIVE_EXPIRY,
        ssl=_tls_context(trust_env),
        # No DNS cache, as before: a target that moves is found on the next connection.
        use_dns_cache=False,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING},
        cookie_jar=aiohttp.DummyCookieJar(),
        # `_Decoder` undoes the content coding, as httpx did: aiohttp would refuse a
        # response in a coding it cannot decode, where httpx passed the body through.
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(),  # no limits of its own; callers set the budget
        trust_env=trust_env,
        max_line_size=MAX_HEAD_LINE,
        max_field_size=MAX_HEAD_LINE,
        max_headers=MAX_RESPONSE_HEADERS,
    )
    # aiohttp sends an idempotent request (GET, PUT, DELETE, ...) a second time when the
    # connection drops before a response; a target must see an attempt at most once, as
    # under httpx, and the retry policy decides on another. No public switch exists; the
    # pin on aiohttp's version and a test keep this one honest.
    session._retry_connection = False
    return session


def _tls_context(trust_env: bool) -> ssl.SSLContext:
    if trust_env and os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if trust_env and os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    return ssl.create_default_context(cafile=certifi.where())


def request_target(url: str) -> tuple[URL, str | None]:
    """Return the URL to connect to, and the `Authorization` value its userinfo stands for.

    URL userinfo is sent as basic auth (UTF-8, as httpx did; aiohttp alone would use
    Latin-1) and never on the request line. The value is None for a URL without one.
    Raise ValueError for a URL that cannot be sent (see `wire_url`).
    """
    target = wire_url(url)
    if target.raw_user is None and target.raw_password is None:
        return target, None
    credentials = f"{target.user or ''}:{target.password or ''}"
    target = target.with_user(None)
    if credentials == ":":
        return target, None
    return target, "Basic " + base64.b64encode(credentials.encode()).decode("ascii")


async def perform(
    client: aiohttp.ClientSession, spec: HttpRequestSpec, *, timeout_ms: int
) -> CallOutcome:
    """Send `spec` once and read the response body in full.

    Return a `CallOutcome` for any response, 2xx or not (the caller decides on retries).
    Raise `CallError` (retryable) on a transport error, a body-read error, a body over
    `MAX_RESPONSE_BYTES`, or when `timeout_ms` runs out; its message is redacted and it
    keeps the status code when a response had started. Raise `PermanentCallError` for a
    URL that cannot be sent. A `timeout_ms` of 0 or less means `DEFAULT_EXEC_TIMEOUT_MS`.
    """
    timeout_ms = effective_timeout_ms(timeout_ms)
    started = time.monotonic()
    try:
        url, userinfo_auth = request_target(spec.url)
    except ValueError as exc:
        raise PermanentCallError(spec.secrets.redact(f"url cannot be sent: {exc}")) from None
    if url.scheme not in ALLOWED_SCHEMES:
        raise CallError(
            f"request failed: scheme {url.scheme!r} is not allowed (http and https only)"
        )
    headers = _job_headers(spec.headers, userinfo_auth)
    body = spec.body or None
    chunked = _chunked(headers, body, spec.secrets)
    status: int | None = None
    retry_after: str | None = None
    deadline = asyncio.timeout(timeout_ms / 1000)
    try:
        async with deadline:
            response = await client.request(
                spec.method,
                url,
                data=body,
                chunked=chunked or None,  # False would still switch chunking on
                allow_redirects=False,
                skip_auto_headers=_SKIP_AUTO_HEADERS,
                middlewares=(
                    _send_exactly(
                        headers,
                        chunked=chunked,
                        empty_length=body is not None or spec.method in _EMPTY_LENGTH_METHODS,
                    ),
                ),
            )
            try:
                status = response.status
                values = response.headers.getall("Retry-After", None)
                retry_after = ", ".join(values) if values is not None else None  # as httpx
                content = await _read_capped(response)
            finally:
                # After a full read the connection is back in the pool; otherwise drop it.
                response.close()
    except TimeoutError:
        raise CallError(
            f"attempt timed out after {timeout_ms} ms", status_code=status, retry_after=retry_after
        ) from None
    except CallError as exc:
        exc.retry_after = retry_after
        raise
    except aiohttp.InvalidURL as exc:
        detail = _detail(exc, url, spec)
        raise PermanentCallError(spec.secrets.redact(f"url cannot be sent: {detail}")) from None
    except (aiohttp.ClientError, OSError, ValueError, UnicodeError, zlib.error) as exc:
        if deadline.expired():  # cancelled by the deadline, but surfaced as another error
            raise CallError(
                f"attempt timed out after {timeout_ms} ms",
                status_code=status,
                retry_after=retry_after,
            ) from None
        what = "reading the response failed" if status is not None else "request failed"
        raise CallError(
            spec.secrets.redact(f"{what}: {_detail(exc, url, spec)}"),
            status_code=status,
            retry_after=retry_after,
        ) from None
    return CallOutcome(
        status_code=response.status,
        body=content,
        duration_ms=_elapsed_ms(started),
        ok=200 <= response.status < 300,
        retry_after=retry_after,
    )


def _job_headers(
    headers: list[tuple[str, str]], userinfo_auth: str | None
) -> list[tuple[str, str]]:
    """Return the spec's headers, with URL userinfo replacing any `Authorization` as httpx did."""
    if userinfo_auth is None:
        return headers
    result: list[tuple[str, str]] = []
    placed = False
    for name, value in headers:
        if name.lower() != "authorization":
            result.append((name, value))
        elif not placed:  # in the first one's place; the others go
            result.append(("Authorization", userinfo_auth))
            placed = True
    if not placed:
        result.append(("Authorization", userinfo_auth))
    return result


def _chunked(headers: list[tuple[str, str]], body: bytes | None, secrets: Secrets) -> bool:
    """Return whether the job asked for a chunked body; refuse framing that cannot be sent.

    aiohttp frames the body itself and never sees the job's headers (they go on in
    `_send_exactly`), so the job's own framing headers are checked here, as h11 did under
    httpx: `Transfer-Encoding` can only be `chunked`, and a `Content-Length` on a body
    that is not chunked must match it.
    """
    framing = [(name.lower(), value.strip()) for name, value in headers]
    codings = [value for name, value in framing if name == "transfer-encoding"]
    if any(value.lower() != "chunked" for value in codings):
        raise CallError("request failed: only Transfer-Encoding: chunked is supported")
    if codings:
        return True
    size = len(body or b"")
    for name, value in framing:
        if name == "content-length" and value != str(size):
            raise CallError(
                secrets.redact(
                    f"request failed: the Content-Length header says {value!r} "
                    f"but the body has {size} bytes"
                )
            )
    return False


def _send_exactly(
    headers: list[tuple[str, str]], *, chunked: bool, empty_length: bool
) -> aiohttp.ClientMiddlewareType:
    """Return a middleware that puts the job's headers on the request exactly as given.

    aiohttp's own header merge folds names that differ only in case (`X-A` then `x-a`
    would leave one), so the job's headers go on here, after aiohttp has built its own;
    each of aiohttp's that the job also sets is dropped in favour of the job's. Without
    `empty_length`, aiohttp's `Content-Length: 0` for a request with no body is dropped.
    """
    replaced = {name.lower() for name, _ in headers}
    if chunked:  # a chunked body carries no length (RFC 9112, section 6.3)
        headers = [pair for pair in headers if pair[0].lower() != "content-length"]
    if chunked or not empty_length:
        replaced.add("content-length")
    # Host goes first, whoever sets it (RFC 9112, section 3.2).
    host = [pair for pair in headers if pair[0].lower() == "host"]
    rest = [pair for pair in headers if pair[0].lower() != "host"]

    async def middleware(
        request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        own = [
            (name, value) for name, value in request.headers.items() if name.lower() not in replaced
        ]
        request.headers.clear()
        request.headers.extend(host)
        request.headers.extend(own)  # aiohttp puts its Host first
        request.headers.extend(rest)
        return await handler(request)

    return middleware


def _detail(exc: BaseException, url: URL, spec: HttpRequestSpec) -> str:
    # aiohttp's messages may quote the URL as sent; put back the job's own spelling, the
    # one every secret form in `spec.secrets` is matched against. Its parser errors span
    # lines (with a caret under the offending byte): keep them on one.
    if isinstance(exc, aiohttp.ClientConnectorError):
        text = _connect_failure(exc)
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.replace(str(url), spec.url).split())


def _connect_failure(exc: aiohttp.ClientConnectorError) -> str:
    """Say why no connection was made, in a user's words.

    aiohttp's own text names its TLS setting (`ssl:default`, on plain http too) and, on
    uvloop, gives no reason for a refusal (`Connect call failed`), only its errno.
    """
    where = f"{exc.host}:{exc.port}"
    reason = exc.os_error
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve host {exc.host}: {reason.strerror or type(reason).__name__}"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"the TLS certificate of {where} is not trusted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"the TLS handshake with {where} failed: {reason}"
    why = os.strerror(reason.errno) if reason.errno else reason.strerror
    return f"cannot connect to {where}: {why or type(reason).__name__}"


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    decoder = _Decoder.for_codings(response.headers.getall("Content-Encoding", []))
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(READ_CHUNK):
        if decoder is not None:
            chunk = decoder.decode(chunk, limit=MAX_RESPONSE_BYTES - size + 1)
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise _over_cap(response)
        chunks.append(chunk)
    if decoder is not None:
        chunk = decoder.flush(limit=MAX_RESPONSE_BYTES - size + 1)
        if size + len(chunk) > MAX_RESPONSE_BYTES:
            raise _over_cap(response)
        chunks.append(chunk)
    return b"".join(chunks)


def _over_cap(response: aiohttp.ClientResponse) -> CallError:
    return CallError(
        f"response body exceeds {MAX_RESPONSE_BYTES} bytes (4 MiB)", status_code=response.status
    )


class _Inflater:
    """Undoes one gzip or deflate coding; raises `zlib.error` on a corrupt stream."""

    def __init__(self, coding: str) -> None:
        gzip = coding == "gzip"
        self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16 if gzip else zlib.MAX_WBITS)
        self._may_be_raw = not gzip

    def decode(self, data: bytes, limit: int) -> bytes:
        """Return at most `limit` bytes; fewer means all of `data` was consumed."""
        may_be_raw, self._may_be_raw = self._may_be_raw, False
        try:
            return self._zlib.decompress(data, limit)
        except zlib.error:
            if not may_be_raw:
                raise
            # Some servers send deflate without its zlib wrapper; httpx retried the first
            # chunk as raw deflate, so do we.
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._zlib.decompress(data, limit)

    def flush(self) -> bytes:
        return self._zlib.flush()


class _Decoder:
    """Undoes a response's `Content-Encoding` the way httpx did.

    gzip and deflate are undone in the reverse order of their application; `identity`
    and codings it does not know pass through untouched, so a 2xx whose body cannot be
    decoded still succeeds (aiohttp alone would fail it). Each stage stops at the
    caller's limit, so a small compressed body never expands past the cap in memory.
    """

    def __init__(self, stages: list[_Inflater]) -> None:
        self._stages = stages

    @classmethod
    def for_codings(cls, values: list[str]) -> _Decoder | None:
        """Return the decoder for these `Content-Encoding` values, or None when none applies."""
        codings = [coding.strip().lower() for value in values for coding in value.split(",")]
        stages = [_Inflater(coding) for coding in reversed(codings) if coding in _INFLATED]
        return cls(stages) if stages else None

    def decode(self, data: bytes, *, limit: int) -> bytes:
        """Return the decoded bytes: `limit` of them once any stage reaches `limit`.

        An inner stage cut at `limit` would silently truncate the body, so reaching it
        anywhere reports the body as over the caller's cap. With two codings, a body
        within one read of the cap may therefore be refused: refusing is safe, a cut
        body would not be.
        """
        for stage in self._stages:
            data = stage.decode(data, limit)
            if len(data) >= limit:
                break
        return data

    def flush(self, *, limit: int) -> bytes:
        """Return what the stages still hold, under the same rule as `decode`."""
        data = b""
        for stage in self._stages:
            data = stage.decode(data, limit) + stage.flush()
            if len(data) >= limit:
                break
        return data


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


def snippet(body: bytes, secrets: Secrets) -> str:
    """Return the first `SNIPPET_CHARS` characters of `body` as text, redacted."""
    # Redact a window long enough to hold a secret that straddles the cut, then cut.
    window = SNIPPET_CHARS + secrets.longest_form()
    text = body[: window * 4].decode("utf-8", errors="replace")[:window]
    return secrets.redact(text)[:SNIPPET_CHARS]


# An HTTP attempt's part of `last_call` when no request was built (a configuration
# error, or an attempt whose worker was lost): nothing is known of a request.
NO_REQUEST: dict[str, Any] = {
    "method": None,
    "url": None,
    "status_code": None,
    "response_snippet": None,
}


def request_fields(spec: HttpRequestSpec, result: CallOutcome | CallError) -> dict[str, Any]:
    """Return an HTTP attempt's part of `last_call`: what was sent and what came back,
    redacted. A failure that read no body has an empty snippet."""
    if isinstance(result, CallOutcome):
        status_code: int | None = result.status_code
        body = result.body
    else:
        status_code, body = result.status_code, b""
    return {
        "method": spec.method,
        "url": spec.secrets.redact(spec.url),
        "status_code": status_code,
        "response_snippet": snippet(body, spec.secrets),
    }


def effective_timeout_ms(exec_timeout_ms: int | None) -> int:
    """Return the timeout an attempt runs under: `exec_timeout_ms`, or the default for 0."""
    if exec_timeout_ms is None or exec_timeout_ms <= 0:
        return DEFAULT_EXEC_TIMEOUT_MS
    return exec_timeout_ms
