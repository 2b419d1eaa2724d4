"""Serve an ASGI app with Uvicorn until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from zilean.config import ListenAddress

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
MAX_HEADER_BYTES = 64 * 1024
GRACEFUL_SHUTDOWN = 25  # seconds for in-flight requests, under a 30 s stop grace period


class Server(uvicorn.Server):
    """Uvicorn, minus re-raising the stop signal once serving ends.

    Uvicorn re-delivers SIGINT/SIGTERM after a graceful stop, which would kill the
    process before our own clean-up (child workers, embedded Postgres) runs.
    """

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {
            sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def build_server(app: ASGIApp, host: str, port: int) -> Server:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,  # our structlog handler on the root logger formats everything
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        server_header=False,
        # Client addresses are ours to interpret (UI_TRUST_PROXY_HEADERS and friends);
        # Uvicorn must not rewrite them from X-Forwarded-For on its own.
        proxy_headers=False,
        # Bound what one connection can pin: 64 KiB of request headers.
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    return Server(config)


async def serve(app: ASGIApp, listen: ListenAddress) -> None:
    """Serve until a signal asks us to stop; exit non-zero when the port cannot be bound."""
    server = build_server(app, listen.host or "0.0.0.0", listen.port)  # noqa: S104
    await server.serve()
    if not server.started:
        raise SystemExit(1)
