"""A local HTTP target for HTTP-job tests: records every request, answers as scripted."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.servers import live_server


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    received_at: float = 0.0  # time.monotonic() when the request arrived


@dataclass
class ScriptedResponse:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)


class HttpTarget:
    """What the target has received, and the responses it will give next (FIFO, then 200)."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[RecordedRequest] = []
        self._responses: deque[ScriptedResponse] = deque()
        self._received = threading.Condition()

    def respond(self, *responses: ScriptedResponse) -> None:
        self._responses.extend(responses)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        with self._received:
            if not self._received.wait_for(lambda: len(self.requests) >= count, timeout=timeout):
                raise TimeoutError(f"got {len(self.requests)} requests, expected {count}")
            return list(self.requests)

    async def _handle(self, request: Request) -> Response:
        arrived = time.monotonic()
        body = await request.body()
        with self._received:
            self.requests.append(
                RecordedRequest(
                    method=request.method,
                    path=request.url.path,
                    query=request.url.query,
                    headers={k.lower(): v for k, v in request.headers.items()},
                    body=body,
                    received_at=arrived,
                )
            )
            self._received.notify_all()
        scripted = self._responses.popleft() if self._responses else ScriptedResponse()
        return Response(scripted.body, status_code=scripted.status, headers=scripted.headers)

    def app(self) -> Starlette:
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        return Starlette(routes=[Route("/{path:path}", self._handle, methods=methods)])


@contextmanager
def http_target() -> Iterator[HttpTarget]:
    target = HttpTarget()
    with live_server(target.app()) as base_url:
        target.base_url = base_url
        yield target


@contextmanager
def hanging_target() -> Iterator[tuple[str, list[str]]]:
    """Serve a route that never answers; yield its URL and the paths it received."""
    received: list[str] = []
    never = asyncio.Event()

    async def hang(request: Request) -> Response:
        received.append(request.url.path)
        await never.wait()
        return Response("never")

    with live_server(Starlette(routes=[Route("/hang", hang)])) as base_url:
        yield f"{base_url}/hang", received
