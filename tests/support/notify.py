"""Real receivers for notification tests: an SMTP server (aiosmtpd), a webhook receiver
that verifies signatures as docs/notifications.md shows, and core's notifier running live.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.integration.conftest import KEY
from tests.support.actors import client_for
from tests.support.monitoring import eventually
from tests.support.servers import free_port, live_server
from zilean.crypto.secretbox import SecretBox
from zilean.notify.dispatcher import Notifier

WAIT = 15.0  # seconds a delivery may take to arrive


async def _wait(count: int, items: list[Any], within: float) -> list[Any]:
    """Wait until `items` (filled by a server thread) holds `count`; return a copy."""
    deadline = time.monotonic() + within
    while len(items) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(items)} of {count} within {within} s: {items}")
        await asyncio.sleep(0.02)
    return list(items)


@dataclass
class MailServer:
    """An SMTP server on loopback that accepts `user`/`password` logins (no TLS)."""

    port: int = 0
    messages: list[Message] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)
    user: str = "mailer"
    password: str = "relay-pass-42"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.original_content))
        return "250 OK"

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth: Any
    ) -> AuthResult:
        if isinstance(auth, LoginPassword):
            login = (auth.login.decode(), auth.password.decode())
            self.logins.append(login)
            return AuthResult(success=login == (self.user, self.password), handled=False)
        return AuthResult(success=False, handled=False)

    async def wait_for(self, count: int, within: float = WAIT) -> list[Message]:
        return await _wait(count, self.messages, within)


@contextmanager
def mail_server() -> Iterator[MailServer]:
    mail = MailServer(port=free_port())
    controller = Controller(
        mail,
        hostname="127.0.0.1",
        port=mail.port,
        authenticator=mail.authenticate,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield mail
    finally:
        controller.stop()


def verify(secret: str, headers: dict[str, str], body: bytes, tolerance: float = 300) -> bool:
    """What a receiver does (docs/notifications.md): fresh timestamp, matching HMAC."""
    timestamp = headers.get("x-zilean-timestamp", "")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    given = headers.get("x-zilean-signature", "").removeprefix("sha256=")
    return hmac.compare_digest(expected.hexdigest(), given)


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    verified: bool | None  # None: the path has no secret to check against


@dataclass
class Receiver:
    """Webhook deliveries by path; a path with a secret has each delivery verified."""

    base_url: str = ""
    secrets: dict[str, str] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    status: int = 200

    def at(self, path: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.path == path]

    async def wait_for(self, count: int, within: float = WAIT) -> list[Delivery]:
        return await _wait(count, self.deliveries, within)

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        path = request.url.path
        secret = self.secrets.get(path)
        verified = None if secret is None else verify(secret, headers, raw)
        self.deliveries.append(Delivery(path, headers, json.loads(raw), verified))
        return Response("ok", status_code=self.status)


@contextmanager
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    with live_server(
        Starlette(routes=[Route("/{path:path}", found.handle, methods=["POST"])])
    ) as url:
        found.base_url = url
        yield found


@asynccontextmanager
async def notifier_for(engine: AsyncEngine, **options: Any) -> AsyncIterator[Notifier]:
    """Core's notifier, leading unless told, looking at the outbox every 20 ms, for the
    block. Alarms are evaluated by hand unless `alarm_interval` is given: the notifier's
    own first evaluation, made as it starts, is over before the block begins."""
    settings: dict[str, Any] = {
        "leading": lambda: True,
        "poll_interval": 0.02,
        "alarm_interval": 3600.0,
        "digest_window": 5.0,
    }
    notifier = Notifier(engine, SecretBox(base64.b64decode(KEY)), **(settings | options))
    stop = asyncio.Event()
    running = asyncio.create_task(notifier.run(stop))
    try:
        if "alarm_interval" not in options and "leading" not in options:

            async def evaluated() -> bool:
                return notifier.evaluations > 0

            await eventually(evaluated, what="the notifier's first alarm evaluation")
        yield notifier
    finally:
        stop.set()
        await running


async def add_target(app: FastAPI, session: str, **fields: Any) -> dict[str, Any]:
    async with client_for(app, session) as client:
        response = await client.post("/api/notify/targets", json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def set_smtp(app: FastAPI, session: str, mail: MailServer, **fields: Any) -> None:
    body = {
        "host": "127.0.0.1",
        "port": mail.port,
        "username": mail.user,
        "password": mail.password,
        "from": "zilean@example.com",
        "enabled": True,
    }
    async with client_for(app, session) as client:
        response = await client.put("/api/settings/smtp", json=body | fields)
    assert response.status_code == 200, response.text


@contextmanager
def hanging_receiver() -> Iterator[tuple[str, list[float]]]:
    """A webhook URL that takes POSTs and never answers; yield it and when each arrived."""
    arrived: list[float] = []
    never = asyncio.Event()

    async def hang(request: Request) -> Response:
        arrived.append(time.monotonic())
        await never.wait()
        return Response("never")

    with live_server(Starlette(routes=[Route("/hang", hang, methods=["POST"])])) as url:
        yield f"{url}/hang", arrived
