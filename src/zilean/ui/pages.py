"""Server-rendered pages: sign in, sign out, accept an invite, and the account page.

Every form is read with a body cap and a CSRF check before anything else happens; the
sign-in and invite forms also pass a per-client rate limiter, which only a request with
a valid CSRF token can spend.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import jinja2
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from zilean.api.access import NotAuthenticated, client_ip
from zilean.audit.log import Actor
from zilean.auth.invites import accept_invite, find_valid_invite
from zilean.auth.login import LOGIN_FAILED_MESSAGE, sign_in, sign_out
from zilean.auth.principal import Principal, session_principal
from zilean.auth.sessions import SESSION_COOKIE, SESSION_TTL
from zilean.auth.users import change_own_password
from zilean.config import UiSettings
from zilean.errors import InvalidInput
from zilean.ui.forms import (
    FormError,
    csrf_token,
    read_checked_form,
    set_csrf_cookie,
)
from zilean.ui.ratelimit import RateLimiter, client_key

router = APIRouter(include_in_schema=False)

templates = jinja2.Environment(
    loader=jinja2.PackageLoader("zilean.ui", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)

TOO_MANY_LOGINS = "Too many sign-in attempts. Try again in a minute."
TOO_MANY_INVITES = "Too many attempts. Try again in a minute, then open your invite link again."
RATE_LIMIT_RETRY_AFTER = "60"
INVALID_INVITE = "This invite link is invalid or has expired. Ask for a new invite."
INVITE_FORM_SUFFIX = " Open your invite link again."


def cookie_secure(request: Request) -> bool:
    """Secure cookies, except over plain HTTP on a loopback address (local `zilean up`)."""
    host = request.client.host if request.client else ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return not (request.url.scheme == "http" and loopback)


def render(
    request: Request,
    template: str,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    page = templates.get_template(template).render(csrf_token=csrf_token(request), **context)
    response = HTMLResponse(page, status_code=status_code, headers=headers)
    response.headers["Cache-Control"] = "no-store"
    set_csrf_cookie(request, response, secure=cookie_secure(request))
    return response


def _settings(request: Request) -> UiSettings:
    settings: UiSettings = request.app.state.settings
    return settings


def safe_next(value: str | None) -> str:
    """Only same-site relative paths: never `//host` or an absolute URL."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def _login_page(request: Request, status_code: int = 200, **context: Any) -> HTMLResponse:
    settings = _settings(request)
    context.setdefault("email", "")
    context.setdefault("error", None)
    context.setdefault("notice", None)
    context.setdefault("next", "/")
    demo = settings.demo_display_password if settings.demo_mode else None
    return render(
        request, "login.html", status_code, title="Sign in", demo_password=demo, wide=False,
        **context,
    )  # fmt: skip


async def current_principal(request: Request) -> Principal | None:
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    async with request.app.state.engine.connect() as conn:
        return await session_principal(conn, cookie)


async def signed_in_user(request: Request) -> Principal:
    principal = await current_principal(request)
    if principal is None:
        raise NotAuthenticated()
    return principal


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> Response:
    if await current_principal(request) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    notice = (
        "Your password is set. Sign in to continue." if "welcome" in request.query_params else None
    )
    return _login_page(request, next=safe_next(next), notice=notice)


@router.post("/login")
async def login_submit(request: Request) -> Response:
    try:
        fields = await read_checked_form(request)
    except FormError as exc:
        return _login_page(request, exc.status_code, error=exc.message)
    email = fields.get("email", "")
    next_path = safe_next(fields.get("next"))
    limiter: RateLimiter = request.app.state.login_limiter
    settings = _settings(request)
    if not limiter.allow(client_key(request, trust_proxy_headers=settings.trust_proxy_headers)):
        return _login_page(
            request,
            429,
            error=TOO_MANY_LOGINS,
            email=email,
            next=next_path,
            headers={"Retry-After": RATE_LIMIT_RETRY_AFTER},
        )
    token = await sign_in(
        request.app.state.engine,
        email,
        fields.get("password", ""),
        ip=client_ip(request),
        user_agent=request.headers.get("user-agent"),
    )
    if token is None:
        return _login_page(request, 401, error=LOGIN_FAILED_MESSAGE, email=email, next=next_path)
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(SESSION_TTL.total_seconds()),
        httponly=True,
        samesite="lax",
        secure=cookie_secure(request),
        path="/",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    try:
        await read_checked_form(request)
    except FormError as exc:
        return _login_page(request, exc.status_code, error=exc.message)
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        await sign_out(request.app.state.engine, cookie, ip=client_ip(request))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", secure=cookie_secure(request), httponly=True)
    return response


def _invite_page(request: Request, status_code: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("error", None)
    context.setdefault("email", None)
    context.setdefault("token", "")
    return render(
        request, "accept_invite.html", status_code, title="Accept invite", wide=False, **context
    )


@router.get("/admin/accept-invite")
async def accept_invite_form(request: Request, token: str = "") -> Response:
    """Check the token first, so a dead link says so before anyone types a password."""
    async with request.app.state.engine.connect() as conn:
        invite = await find_valid_invite(conn, token) if token else None
    if invite is None:
        return _invite_page(request, 400, error=INVALID_INVITE)
    return _invite_page(request, email=invite.email, token=token)


@router.post("/admin/accept-invite")
async def accept_invite_submit(request: Request) -> Response:
    try:
        fields = await read_checked_form(request)
    except FormError as exc:
        return _invite_page(request, exc.status_code, error=exc.message + INVITE_FORM_SUFFIX)
    limiter: RateLimiter = request.app.state.invite_limiter
    settings = _settings(request)
    if not limiter.allow(client_key(request, trust_proxy_headers=settings.trust_proxy_headers)):
        return _invite_page(
            request, 429, error=TOO_MANY_INVITES, headers={"Retry-After": RATE_LIMIT_RETRY_AFTER}
        )
    token = fields.get("token", "")
    async with request.app.state.engine.begin() as conn:
        invite = await find_valid_invite(conn, token) if token else None
        if invite is None:
            return _invite_page(request, 400, error=INVALID_INVITE)
        password = fields.get("password", "")
        if password != fields.get("password_confirm", ""):
            return _invite_page(
                request, 400, error="The passwords do not match.", email=invite.email, token=token
            )
        try:
            await accept_invite(conn, token, password, ip=client_ip(request))
        except InvalidInput as exc:
            return _invite_page(request, 400, error=exc.message, email=invite.email, token=token)
    return RedirectResponse("/login?welcome=1", status_code=303)


def _account_page(
    request: Request, principal: Principal, status_code: int = 200, **context: Any
) -> HTMLResponse:
    context.setdefault("error", None)
    context.setdefault("notice", None)
    return render(
        request,
        "account.html",
        status_code,
        title="Account",
        wide=True,
        principal=principal,
        permissions=sorted(principal.permissions),
        **context,
    )


@router.get("/account")
async def account(request: Request, principal: Principal = Depends(signed_in_user)) -> Response:  # noqa: B008
    notice = "Password changed." if "changed" in request.query_params else None
    return _account_page(request, principal, notice=notice)


@router.post("/account/password")
async def account_password(
    request: Request,
    principal: Principal = Depends(signed_in_user),  # noqa: B008
) -> Response:
    try:
        fields = await read_checked_form(request)
    except FormError as exc:
        return _account_page(request, principal, exc.status_code, error=exc.message)
    new_password = fields.get("new_password", "")
    if new_password != fields.get("new_password_confirm", ""):
        return _account_page(request, principal, 400, error="The new passwords do not match.")
    try:
        async with request.app.state.engine.begin() as conn:
            await change_own_password(
                conn,
                principal,
                Actor(principal.user_id, principal.email, client_ip(request)),
                current_password=fields.get("current_password", ""),
                new_password=new_password,
                keep_session=request.cookies.get(SESSION_COOKIE),
            )
    except InvalidInput as exc:
        return _account_page(request, principal, 400, error=exc.message)
    return RedirectResponse("/account?changed=1", status_code=303)
