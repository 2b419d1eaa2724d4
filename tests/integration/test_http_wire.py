"""What perform() puts on the wire and how it reads the reply, byte for byte.

A raw loopback server records each request exactly as it arrived (an ASGI server would
fold header case and duplicates) and answers with scripted bytes. Several rows pin what
httpx, the previous client, did, since a job's request must not change with the client.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import os
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
import pytest

from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.http.call import (
    MAX_RESPONSE_BYTES,
    CallOutcome,
    perform,
    request_target,
)
from zilean.jobkinds.http.request import HttpRequestSpec
from zilean.jobkinds.redaction import NO_SECRETS

TIMEOUT_MS = 5_000
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
HANG_UP = b""  # a reply that closes the connection without a response


@dataclass
class RawServer:
    """Requests as received (head and body bytes), and the replies still to give (then OK)."""

    replies: list[bytes]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                self.requests.append(await _read_request(reader))
                reply = self.replies.pop(0) if self.replies else OK
                if reply == HANG_UP:
                    writer.transport.abort()
                    return
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    fields = [line.lower() for line in head.split(b"\r\n")[1:]]
    if b"transfer-encoding: chunked" in fields:
        return head + await reader.readuntil(b"0\r\n\r\n")
    lengths = [line.split(b":", 1)[1] for line in fields if line.startswith(b"content-length:")]
    return head + (await reader.readexactly(int(lengths[0])) if lengths else b"")


@asynccontextmanager
async def raw_server(*replies: bytes) -> AsyncIterator[RawServer]:
    server = RawServer(list(replies))
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield server


def parse(request: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """Split a recorded request into its request line, its header list and its body."""
    head, _, body = request.partition(b"\r\n\r\n")
    line, *fields = head.decode().split("\r\n")
    pairs = [field.split(": ", 1) for field in fields]
    return line, [(name, value) for name, value in pairs], body


def spec(
    method: str, url: str, headers: list[tuple[str, str]], body: bytes | None = None
) -> HttpRequestSpec:
    return HttpRequestSpec(method, url, headers, body, NO_SECRETS)


async def test_the_request_is_the_spec_byte_for_byte(http_session: aiohttp.ClientSession) -> None:
    headers = [("X-Dup", "1"), ("x-dup", "2"), ("X-Utf", "é"), ("X-Dup", "3")]
    async with raw_server() as server:
        url = f"{server.base_url}/a%2Fb/%7e/x?q=%2F&r=a+b"
        await perform(http_session, spec("POST", url, headers, b"raw"), timeout_ms=TIMEOUT_MS)

    [request] = server.requests
    line, sent, body = parse(request)
    assert line == "POST /a%2Fb/%7e/x?q=%2F&r=a+b HTTP/1.1"  # escapes kept as written
    # The client's own headers (no Content-Type, no Cookie), then the job's in order,
    # duplicates and spelling kept.
    assert sent == [
        ("Host", f"127.0.0.1:{server.port}"),
        ("User-Agent", "Zilean"),
        ("Accept-Encoding", "gzip, deflate"),
        ("Accept", "*/*"),
        ("Content-Length", "3"),
        *headers,
    ]
    assert body == b"raw"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # a space and non-ASCII are percent-encoded as UTF-8
        ("/a b/é", "/a%20b/%C3%A9"),
        # dot segments are resolved, a stray % is left alone
        ("/x/./y/../z%", "/x/z%"),
        # the query keeps what a query may carry; a space is still encoded
        ("/q?t=`{}|^&s=a b&e=%zz", "/q?t=`{}|^&s=a%20b&e=%zz"),
        # the fragment is never sent, and nor is an empty query
        ("/f?#top", "/f"),
        ("", "/"),
    ],
)
async def test_the_request_line_carries_the_url_as_httpx_did(
    http_session: aiohttp.ClientSession, path: str, expected: str
) -> None:
    async with raw_server() as server:
        await perform(http_session, spec("GET", server.base_url + path, []), timeout_ms=TIMEOUT_MS)

    assert parse(server.requests[0])[0] == f"GET {expected} HTTP/1.1"


@pytest.mark.parametrize(
    ("method", "body", "length"),
    [
        ("GET", None, None),
        ("DELETE", None, None),  # aiohttp alone would add Content-Length: 0
        ("POST", None, "0"),
        ("PATCH", b"", "0"),  # an empty body is no body
        ("GET", b"", None),
        ("PUT", b"abc", "3"),
        ("GET", b"abc", "3"),
    ],
)
async def test_content_length_is_sent_where_httpx_sent_it_and_content_type_never(
    http_session: aiohttp.ClientSession, method: str, body: bytes | None, length: str | None
) -> None:
    async with raw_server() as server:
        await perform(http_session, spec(method, server.base_url, [], body), timeout_ms=TIMEOUT_MS)

    sent = dict(parse(server.requests[0])[1])
    assert sent.get("Content-Length") == length
    assert "Content-Type" not in sent


async def test_the_jobs_host_and_user_agent_replace_the_clients(
    http_session: aiohttp.ClientSession,
) -> None:
    headers = [("user-agent", "mine/1"), ("Host", "other.example")]
    async with raw_server() as server:
        await perform(http_session, spec("GET", server.base_url, headers), timeout_ms=TIMEOUT_MS)

    sent = parse(server.requests[0])[1]
    assert sent[0] == ("Host", "other.example")  # Host stays first
    assert [pair for pair in sent if pair[0].lower() in {"host", "user-agent"}] == [
        ("Host", "other.example"),
        ("user-agent", "mine/1"),
    ]


async def test_url_userinfo_is_sent_as_utf8_basic_auth_replacing_the_jobs(
    http_session: aiohttp.ClientSession,
) -> None:
    async with raw_server() as server:
        url = f"http://bob:p%C3%A9@127.0.0.1:{server.port}/x"
        headers = [("Authorization", "Bearer job"), ("X-A", "1")]
        await perform(http_session, spec("GET", url, headers), timeout_ms=TIMEOUT_MS)

    line, sent, _ = parse(server.requests[0])
    assert line == "GET /x HTTP/1.1"
    basic = "Basic " + base64.b64encode("bob:pé".encode()).decode()
    assert [pair for pair in sent if pair[0] in {"Authorization", "X-A"}] == [
        ("Authorization", basic),
        ("X-A", "1"),
    ]


def test_request_target_splits_userinfo_from_the_url() -> None:
    url, auth = request_target("http://h.example/p")
    assert (str(url), auth) == ("http://h.example/p", None)
    url, auth = request_target("http://:pw@h.example:8080/p?q=1")
    assert (str(url), auth) == ("http://h.example:8080/p?q=1", "Basic OnB3")
    assert request_target("http://@h.example/")[1] is None


async def test_a_chunked_job_body_goes_chunked_without_a_length(
    http_session: aiohttp.ClientSession,
) -> None:
    headers = [("Transfer-Encoding", "chunked"), ("Content-Length", "3")]
    async with raw_server() as server:
        await perform(
            http_session, spec("POST", server.base_url, headers, b"abc"), timeout_ms=TIMEOUT_MS
        )

    _, sent, body = parse(server.requests[0])
    assert ("Transfer-Encoding", "chunked") in sent
    assert "Content-Length" not in dict(sent)
    assert body == b"3\r\nabc\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([("Content-Length", "5")], "the Content-Length header says '5' but the body has 3"),
        ([("Transfer-Encoding", "gzip")], "only Transfer-Encoding: chunked is supported"),
    ],
)
async def test_framing_headers_that_cannot_be_honoured_fail_before_sending(
    http_session: aiohttp.ClientSession, headers: list[tuple[str, str]], message: str
) -> None:
    async with raw_server() as server:
        with pytest.raises(CallError, match=message) as caught:
            await perform(
                http_session, spec("POST", server.base_url, headers, b"abc"), timeout_ms=TIMEOUT_MS
            )

    assert not caught.value.permanent
    assert server.requests == []


async def test_an_unsendable_url_is_permanent(http_session: aiohttp.ClientSession) -> None:
    with pytest.raises(PermanentCallError, match="url cannot be sent: non-printable"):
        await perform(http_session, spec("GET", "http://h.example/a\tb", []), timeout_ms=TIMEOUT_MS)


async def test_a_pooled_connection_serves_the_next_attempt(
    http_session: aiohttp.ClientSession,
) -> None:
    async with raw_server() as server:
        for _ in range(3):
            await perform(http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS)

    assert (len(server.requests), server.connections) == (3, 1)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "POST"])
async def test_a_request_whose_connection_drops_is_not_sent_again(
    http_session: aiohttp.ClientSession, method: str
) -> None:
    async with raw_server(HANG_UP, HANG_UP) as server:
        with pytest.raises(CallError, match="request failed: Server disconnected") as caught:
            await perform(http_session, spec(method, server.base_url, []), timeout_ms=TIMEOUT_MS)

    assert caught.value.status_code is None
    assert len(server.requests) == 1  # aiohttp alone would resend an idempotent one


def reply(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{header}\r\n" for header in (*headers, f"Content-Length: {len(body)}"))
    return f"HTTP/1.1 200 OK\r\n{head}\r\n".encode() + body


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("response", "body"),
    [
        (reply(gzip.compress(b"hello"), "Content-Encoding: gzip"), b"hello"),
        (reply(zlib.compress(b"hello"), "Content-Encoding: deflate"), b"hello"),
        # deflate without its zlib wrapper, as some servers send it
        (reply(raw_deflate(b"hello"), "Content-Encoding: deflate"), b"hello"),
        # codings are undone in reverse order; identity is no coding
        (reply(gzip.compress(zlib.compress(b"hi")), "Content-Encoding: deflate, GZIP"), b"hi"),
        (reply(gzip.compress(b"hi"), "Content-Encoding: gzip, identity"), b"hi"),
        # a coding the client cannot undo passes through, as under httpx
        (reply(b"\x8b\x02\x80", "Content-Encoding: br"), b"\x8b\x02\x80"),
    ],
)
async def test_the_body_is_decoded_as_httpx_decoded_it(
    http_session: aiohttp.ClientSession, response: bytes, body: bytes
) -> None:
    async with raw_server(response) as server:
        outcome = await perform(
            http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS
        )

    assert (outcome.ok, outcome.body) == (True, body)


async def test_a_corrupt_coding_fails_while_reading(http_session: aiohttp.ClientSession) -> None:
    async with raw_server(reply(b"not gzip", "Content-Encoding: gzip")) as server:
        with pytest.raises(CallError, match="reading the response failed: Error -3") as caught:
            await perform(http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS)

    assert caught.value.status_code == 200


async def test_the_cap_applies_to_the_decoded_body(http_session: aiohttp.ClientSession) -> None:
    bomb = gzip.compress(b"\0" * (MAX_RESPONSE_BYTES + 1))  # about 4 KiB on the wire
    async with raw_server(reply(bomb, "Content-Encoding: gzip")) as server:
        with pytest.raises(CallError, match="exceeds") as caught:
            await perform(http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS)

    assert caught.value.status_code == 200


@pytest.mark.parametrize("size", [MAX_RESPONSE_BYTES - 64, MAX_RESPONSE_BYTES + 1])
async def test_a_body_in_two_codings_near_the_cap_is_whole_or_refused_never_cut(
    http_session: aiohttp.ClientSession, size: int
) -> None:
    # Random bytes do not compress, so the inner deflate stream is itself over the cap.
    data = os.urandom(size)
    coded = gzip.compress(zlib.compress(data, level=1))
    async with raw_server(reply(coded, "Content-Encoding: deflate, gzip")) as server:
        result: CallOutcome | CallError
        try:
            result = await perform(
                http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS
            )
        except CallError as exc:
            result = exc

    if isinstance(result, CallError):
        assert "exceeds" in str(result)
    else:
        assert size <= MAX_RESPONSE_BYTES
        assert result.body == data


async def test_repeated_retry_after_values_are_joined_as_httpx_did(
    http_session: aiohttp.ClientSession,
) -> None:
    busy = b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nRetry-After: 8\r\nContent-Length: 0\r\n\r\n"
    async with raw_server(busy) as server:
        outcome = await perform(
            http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS
        )

    assert (outcome.status_code, outcome.retry_after) == (503, "7, 8")


async def test_a_response_head_httpx_accepted_is_read(http_session: aiohttp.ClientSession) -> None:
    long_line = reply(b"ok", "X-Long: " + "a" * 12_000)  # aiohttp's default line limit is 8 KiB
    many = reply(b"ok", *(f"X-{index}: a" for index in range(300)))  # and 128 header lines
    async with raw_server(long_line, many) as server:
        for _ in range(2):
            outcome = await perform(
                http_session, spec("GET", server.base_url, []), timeout_ms=TIMEOUT_MS
            )
            assert (outcome.ok, outcome.body) == (True, b"ok")
