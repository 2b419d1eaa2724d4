"""perform() against a real local server: what is sent, what counts as success, limits."""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import free_port, live_server
from tests.support.target import HttpTarget, ScriptedResponse
from zilean.jobkinds.errors import CallError
from zilean.jobkinds.http.call import (
    MAX_RESPONSE_BYTES,
    SNIPPET_CHARS,
    CallOutcome,
    perform,
    request_fields,
    status_error,
)
from zilean.jobkinds.http.request import HttpRequestSpec, build_request
from zilean.jobkinds.redaction import NO_SECRETS, REDACTED

TOKEN = "tok-secret-123"
SECRET_VARIABLE = "var-secret-456"
VARIABLES = {"TOKEN": TOKEN, "SECRET": SECRET_VARIABLE, "REGION": "eu"}
TIMEOUT_MS = 5_000


def spec_for(
    url: str, *, auth_secret: str | None = None, pool_index: int = 0, **overrides: Any
) -> HttpRequestSpec:
    row: dict[str, Any] = {
        "id": uuid.uuid4(),
        "http_method": "GET",
        "url": url,
        "query_params": {},
        "body": None,
        "headers": {},
        "auth_type": "none",
        "auth_config": {},
        "pool_count": 1,
        **overrides,
    }
    return build_request(
        row,
        variables=VARIABLES,
        secret_values={SECRET_VARIABLE},
        auth_secret=auth_secret,
        pool_index=pool_index,
        webhook_hops=None,
    )


async def test_it_sends_the_request_as_built(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    spec = spec_for(
        f"{target.base_url}/sync/{{{{ REGION }}}}?keep=1&mode=old",
        http_method="post",
        query_params={"mode": "full", "region": "{{REGION}}"},
        headers={"X-Request-Source": "zilean", "X-Region": "{{REGION}}"},
        body='{"region": "{{REGION}}", "n": 1}',
        auth_type="bearer",
        auth_secret="{{TOKEN}}",
        pool_count=3,
        pool_index=1,
    )

    outcome = await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    assert outcome.ok
    [sent] = target.requests
    assert sent.method == "POST"
    assert sent.path == "/sync/eu"
    assert sent.query == "keep=1&mode=full&region=eu&pool_idx=1"
    assert sent.body == b'{"region": "eu", "n": 1}'
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["x-request-source"] == "zilean"
    assert sent.headers["x-region"] == "eu"
    assert sent.headers["x-zilean-webhook-hops"] == "1"
    assert sent.headers["user-agent"] == "Zilean"


async def test_basic_and_api_key_auth_reach_the_target(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    basic = spec_for(
        target.base_url, auth_type="basic", auth_config={"username": "alice"}, auth_secret=""
    )
    api_key = spec_for(target.base_url, auth_type="api_key", auth_secret="{{TOKEN}}")

    await perform(http_session, basic, timeout_ms=TIMEOUT_MS)
    await perform(http_session, api_key, timeout_ms=TIMEOUT_MS)

    first, second = target.requests
    assert first.headers["authorization"] == "Basic YWxpY2U6"  # alice: with no password
    assert second.headers["x-api-key"] == TOKEN


async def test_a_2xx_response_succeeds(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    target.respond(ScriptedResponse(204, b""), ScriptedResponse(299, b'{"result": 1}'))

    no_content = await perform(http_session, spec_for(target.base_url), timeout_ms=TIMEOUT_MS)
    edge = await perform(http_session, spec_for(target.base_url), timeout_ms=TIMEOUT_MS)

    assert (no_content.ok, no_content.status_code, no_content.body) == (True, 204, b"")
    assert (edge.ok, edge.status_code, edge.body) == (True, 299, b'{"result": 1}')
    assert status_error(spec_for(target.base_url), edge) is None


async def test_a_500_is_a_retryable_failure_with_its_status(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    target.respond(ScriptedResponse(500, b"database is down"))
    spec = spec_for(target.base_url)

    outcome = await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    assert (outcome.ok, outcome.status_code) == (False, 500)
    error = status_error(spec, outcome)
    assert error is not None
    assert not error.permanent
    assert error.status_code == 500
    assert str(error) == "endpoint returned status 500: database is down"


async def test_a_429_keeps_its_retry_after(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    target.respond(ScriptedResponse(429, b"slow down", {"Retry-After": "7"}))
    spec = spec_for(target.base_url)

    outcome = await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    assert (outcome.ok, outcome.status_code, outcome.retry_after) == (False, 429, "7")
    error = status_error(spec, outcome)
    assert error is not None
    assert error.retry_after == "7"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_not_followed(
    target: HttpTarget, http_session: aiohttp.ClientSession, status: int
) -> None:
    target.respond(ScriptedResponse(status, b"", {"Location": f"{target.base_url}/elsewhere"}))
    spec = spec_for(f"{target.base_url}/old", http_method="post")

    outcome = await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    assert (outcome.ok, outcome.status_code) == (False, status)
    assert [sent.path for sent in target.requests] == ["/old"]


async def test_no_cookie_is_carried_from_one_call_to_the_next(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    target.respond(ScriptedResponse(200, b"", {"Set-Cookie": "session=job-a; Path=/"}))

    await perform(http_session, spec_for(f"{target.base_url}/a"), timeout_ms=TIMEOUT_MS)
    await perform(http_session, spec_for(f"{target.base_url}/b"), timeout_ms=TIMEOUT_MS)
    own = spec_for(f"{target.base_url}/c", headers={"Cookie": "mine=1"})
    await perform(http_session, own, timeout_ms=TIMEOUT_MS)

    first, second, third = target.requests
    assert "cookie" not in first.headers
    assert "cookie" not in second.headers  # the shared session keeps no cookie jar
    assert third.headers["cookie"] == "mine=1"  # a job's own Cookie header is sent as is


async def test_a_body_of_exactly_4_mib_is_read(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    target.respond(ScriptedResponse(200, b"x" * MAX_RESPONSE_BYTES))

    outcome = await perform(http_session, spec_for(target.base_url), timeout_ms=TIMEOUT_MS)

    assert outcome.ok
    assert len(outcome.body) == MAX_RESPONSE_BYTES


async def test_a_body_over_4_mib_fails_the_attempt(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    target.respond(ScriptedResponse(200, b"x" * (MAX_RESPONSE_BYTES + 1)))

    with pytest.raises(CallError, match="exceeds") as caught:
        await perform(http_session, spec_for(target.base_url), timeout_ms=TIMEOUT_MS)

    assert not caught.value.permanent
    assert caught.value.status_code == 200  # the real status is kept


async def test_exec_timeout_bounds_the_whole_attempt(http_session: aiohttp.ClientSession) -> None:
    async def slow(_: Request) -> Response:
        await asyncio.sleep(2)  # the server under test is slow, not the test
        return Response(b"late")

    with live_server(Starlette(routes=[Route("/slow", slow)])) as base_url:
        started = time.monotonic()
        with pytest.raises(CallError, match="timed out after 100 ms") as caught:
            await perform(http_session, spec_for(f"{base_url}/slow"), timeout_ms=100)
        elapsed = time.monotonic() - started

    assert not caught.value.permanent
    assert elapsed < 1.5


async def test_exec_timeout_covers_a_slow_body_and_keeps_the_status(
    http_session: aiohttp.ClientSession,
) -> None:
    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"."
            await asyncio.sleep(0.1)  # the server under test is slow, not the test

    async def slow_body(_: Request) -> Response:
        return StreamingResponse(trickle(), status_code=202)

    with live_server(Starlette(routes=[Route("/slow", slow_body)])) as base_url:
        started = time.monotonic()
        with pytest.raises(CallError, match="timed out after 300 ms") as caught:
            await perform(http_session, spec_for(f"{base_url}/slow"), timeout_ms=300)
        elapsed = time.monotonic() - started

    assert (caught.value.permanent, caught.value.status_code) == (False, 202)
    assert elapsed < 1.5


async def test_a_refused_connection_is_retryable(http_session: aiohttp.ClientSession) -> None:
    spec = spec_for(f"http://127.0.0.1:{free_port()}/{{{{SECRET}}}}")

    with pytest.raises(CallError, match="request failed") as caught:
        await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    assert not caught.value.permanent
    assert caught.value.status_code is None
    assert SECRET_VARIABLE not in str(caught.value)


async def test_a_refused_connection_says_so_with_its_host_and_port(
    http_session: aiohttp.ClientSession,
) -> None:
    port = free_port()

    with pytest.raises(CallError) as caught:
        await perform(http_session, spec_for(f"http://127.0.0.1:{port}/"), timeout_ms=TIMEOUT_MS)

    refused = f"request failed: cannot connect to 127.0.0.1:{port}: Connection refused"
    assert str(caught.value) == refused


async def test_an_unknown_host_is_a_failed_lookup(http_session: aiohttp.ClientSession) -> None:
    # `.invalid` never resolves (RFC 6761); the lookup fails at once, or after the
    # resolver's own timeout on a machine without DNS, hence the long attempt timeout.
    with pytest.raises(CallError) as caught:
        await perform(http_session, spec_for("http://zilean-test.invalid/"), timeout_ms=30_000)

    assert str(caught.value).startswith("request failed: cannot resolve host zilean-test.invalid: ")
    assert not caught.value.permanent


async def test_https_to_a_plain_http_server_is_a_failed_handshake(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    url = target.base_url.replace("http://", "https://") + "/run"

    with pytest.raises(CallError) as caught:
        await perform(http_session, spec_for(url), timeout_ms=TIMEOUT_MS)

    host_port = target.base_url.removeprefix("http://")
    assert str(caught.value).startswith(
        f"request failed: the TLS handshake with {host_port} failed: "
    )
    assert "ssl:default" not in str(caught.value)


def _self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no trust store holds, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_an_untrusted_certificate_is_named_as_such(
    http_session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    cert_path, key_path = _self_signed_certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)

    async def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(CallError) as caught:
            await perform(
                http_session, spec_for(f"https://127.0.0.1:{port}/"), timeout_ms=TIMEOUT_MS
            )

    assert str(caught.value).startswith(
        f"request failed: the TLS certificate of 127.0.0.1:{port} is not trusted: "
    )
    assert not caught.value.permanent


async def test_a_url_password_stays_out_of_the_error(http_session: aiohttp.ClientSession) -> None:
    spec = spec_for(f"http://bob:hunter%2022@127.0.0.1:{free_port()}/run")

    with pytest.raises(CallError, match="request failed") as caught:
        await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    assert "hunter" not in str(caught.value)
    assert "hunter" not in request_fields(spec, caught.value)["url"]


async def test_the_client_refuses_other_schemes(http_session: aiohttp.ClientSession) -> None:
    spec = HttpRequestSpec("GET", "ftp://127.0.0.1/x", [], None, NO_SECRETS)

    with pytest.raises(CallError):
        await perform(http_session, spec, timeout_ms=TIMEOUT_MS)


async def test_last_call_is_redacted(
    target: HttpTarget, http_session: aiohttp.ClientSession
) -> None:
    echo = f'{{"seen": "{TOKEN}", "also": "{SECRET_VARIABLE}"}}'.encode() + b"." * 1000
    target.respond(ScriptedResponse(500, echo))
    spec = spec_for(
        f"{target.base_url}/run",
        query_params={"key": "{{SECRET}}"},
        auth_type="bearer",
        auth_secret="{{TOKEN}}",
    )

    outcome = await perform(http_session, spec, timeout_ms=TIMEOUT_MS)
    record = request_fields(spec, outcome)

    # The request itself carried the real values.
    assert target.requests[0].query == f"key={SECRET_VARIABLE}"
    assert outcome.body.startswith(echo[:30])
    redacted = f'{{"seen": "{REDACTED}", "also": "{REDACTED}"}}'
    assert record == {
        "method": "GET",
        "url": f"{target.base_url}/run?key={REDACTED}",
        "status_code": 500,
        "response_snippet": redacted + "." * (SNIPPET_CHARS - len(redacted)),
    }
    error = status_error(spec, outcome)
    assert error is not None
    assert TOKEN not in str(error)
    assert SECRET_VARIABLE not in str(error)


async def test_last_call_after_an_error_has_no_snippet(http_session: aiohttp.ClientSession) -> None:
    spec = spec_for(f"http://127.0.0.1:{free_port()}/run?k={{{{SECRET}}}}")
    with pytest.raises(CallError) as caught:
        await perform(http_session, spec, timeout_ms=TIMEOUT_MS)

    record = request_fields(spec, caught.value)

    assert record["url"].endswith(f"/run?k={REDACTED}")
    assert (record["status_code"], record["response_snippet"]) == (None, "")


def test_an_outcome_does_not_print_its_body() -> None:
    assert "secret" not in repr(CallOutcome(200, b"secret", 1, True, None))
