"""One error body for every service: `{"error": "<message>"}`."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from zilean.api.access import Forbidden, InvalidApiToken, NotAuthenticated, PasswordChangeRequired
from zilean.errors import UNSTORABLE_MESSAGE, ApiError
from zilean.input_models import validation_message

LOGIN_PATH = "/login"


def error_response(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


def install_error_handlers(app: FastAPI) -> None:
    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        response = error_response(exc.status_code, str(exc.detail))
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        if (
            errors
            and tuple(errors[0].get("loc", ())) == ("body",)
            and isinstance(errors[0].get("input"), bytes)
        ):
            # FastAPI reads a body as JSON only when its Content-Type says JSON.
            content_type = request.headers.get("content-type") or "none"
            return error_response(
                415, f"Content-Type must be application/json (got {content_type!r})"
            )
        return error_response(400, validation_message(errors))

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
    # A lone surrogate (JSON "\ud800") is valid JSON but not text Postgres can hold.
    app.add_exception_handler(UnicodeEncodeError, unstorable)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(NotAuthenticated, not_authenticated)
    app.add_exception_handler(InvalidApiToken, invalid_token)
    app.add_exception_handler(PasswordChangeRequired, forbidden)
    app.add_exception_handler(Forbidden, forbidden)
