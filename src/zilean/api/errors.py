"""One error body for every service: `{"error": "<message>"}`."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from zilean.api.access import Forbidden, InvalidApiToken, NotAuthenticated, PasswordChangeRequired
from zilean.errors import UNSTORABLE_MESSAGE, ApiError

LOGIN_PATH = "/login"


def error_response(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    location = ".".join(
        str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")
    )
    detail = str(first.get("msg", "invalid request"))
    return f"{location}: {detail}" if location else detail


def install_error_handlers(app: FastAPI) -> None:
    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        response = error_response(exc.status_code, str(exc.detail))
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(400, _validation_message(exc))

    async def api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc.status_code, exc.message)

    async def not_authenticated(_: Request, exc: Exception) -> Response:
        # Browsers (and the SPA) follow this to the login page; scripts should use tokens.
        return RedirectResponse(LOGIN_PATH, status_code=302)

    async def invalid_token(_: Request, exc: Exception) -> Response:
        return error_response(401, str(exc))

    async def forbidden(_: Request, exc: Exception) -> Response:
        return error_response(403, str(exc))

    async def unstorable(_: Request, exc: Exception) -> Response:
        # e.g. a NUL character, which Postgres text cannot hold; the transaction rolled back.
        return error_response(400, UNSTORABLE_MESSAGE)

    app.add_exception_handler(DataError, unstorable)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(NotAuthenticated, not_authenticated)
    app.add_exception_handler(InvalidApiToken, invalid_token)
    app.add_exception_handler(PasswordChangeRequired, forbidden)
    app.add_exception_handler(Forbidden, forbidden)
