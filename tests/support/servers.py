"""Live HTTP servers on loopback ports, for tests that need a real socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Message, Receive, Scope, Send


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _QuietServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the test runner owns signals
        pass


@contextmanager
def live_server(
    app: Any, *, startup_timeout: float = 10.0, proxy_headers: bool = True
) -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1 in a background thread; yield its base URL.

    `proxy_headers=False` serves as our services do: the peer address is the socket's,
    never rewritten from X-Forwarded-For.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # In-flight requests (a test's deliberately hanging handler) are cut off after 1 s.
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
        proxy_headers=proxy_headers,
    )
    server = _QuietServer(config)
    server.capture_signals = _no_signals  # type: ignore[method-assign]
    # A daemon thread: a server that fails to stop must never keep pytest from exiting.
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("live server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def _no_signals() -> Iterator[None]:
    yield


class OwnEngineApp:
    """A service's app plus disposing its engine at shutdown, on the loop that used it.

    A live server runs on an event loop of its own (a thread): it must get an engine of its
    own too, since pooled async connections belong to the loop that opened them. Sharing
    the test's engine across the two loops can wedge either side.
    """

    def __init__(self, app: FastAPI, engine: AsyncEngine) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def disposing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.engine.dispose()
            await send(message)

        await self.app(scope, receive, disposing_send)
