"""A cap on request bodies that answers in the API's own error shape.

Starlette's cap answers `413 Content Too Large` in plain text, which a client reading
`{"error": ...}` cannot show; this one answers JSON, whether the body declared its
length or arrived in chunks.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large_message(limit: int) -> str:
    size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit // 1024} KiB"
    return f"the request body is larger than the {size} limit"


class _TooLarge(HTTPException):
    """Raised from `receive`: FastAPI passes an HTTPException on (any other error while it
    reads a body becomes a 400), and the app's handler words it as an error body."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=too_large_message(limit))


class BodyLimitMiddleware:
    """Refuse (413) a body larger than `limit_for(path)` bytes before the route sees it all.

    `limit_for` returns None for a route that caps (and words) its own body.
    """

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int | None]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limit_for(scope["path"]) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._refuse(limit, scope, receive, send)
            return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except _TooLarge:
            if started:
                raise
            await self._refuse(limit, scope, receive, send)

    @staticmethod
    async def _refuse(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse({"error": too_large_message(limit)}, status_code=413)
        await response(scope, receive, send)
