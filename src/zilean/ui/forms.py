"""Reading a posted form safely: a body cap and a read deadline before any other work,
and a CSRF check by double submit (a random cookie echoed in a hidden field)."""

from __future__ import annotations

import asyncio
import hmac
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from zilean.auth.tokens import new_token

MAX_FORM_BYTES = 64 * 1024
FORM_READ_TIMEOUT = 30.0  # seconds to receive the whole body
CSRF_COOKIE = "zilean_csrf"
CSRF_FIELD = "csrf_token"


class FormError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


async def read_form(request: Request) -> dict[str, str]:
    """Return the posted fields (first value of each), or raise FormError (413 or 400)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise FormError(413, "Form submission too large.")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise FormError(400, "Could not read form submission.")
    body = bytearray()
    try:
        async with asyncio.timeout(FORM_READ_TIMEOUT):
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > MAX_FORM_BYTES:
                    raise FormError(413, "Form submission too large.")
    except TimeoutError:
        raise FormError(400, "Could not read form submission.") from None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError):
        raise FormError(400, "Could not read form submission.") from None
    return {key: values[0] for key, values in fields.items()}


def csrf_token(request: Request) -> str:
    """The CSRF token for this browser: the cookie's, or a new one `set_csrf_cookie` will set."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and 20 <= len(existing) <= 100:
        return existing
    token: str | None = getattr(request.state, "new_csrf", None)
    if token is None:
        token = request.state.new_csrf = new_token()
    return token


def set_csrf_cookie(request: Request, response: Response, *, secure: bool) -> None:
    token = getattr(request.state, "new_csrf", None)
    if token:
        response.set_cookie(
            CSRF_COOKIE, token, httponly=True, samesite="strict", secure=secure, path="/"
        )


def csrf_valid(request: Request, fields: dict[str, str]) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    submitted = fields.get(CSRF_FIELD, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), submitted.encode())


STALE_FORM = "This form has expired. Reload the page and try again."


async def read_checked_form(request: Request) -> dict[str, str]:
    """Read a form and insist on a valid CSRF token (403) before anything acts on it."""
    fields = await read_form(request)
    if not csrf_valid(request, fields):
        raise FormError(403, STALE_FORM)
    return fields
