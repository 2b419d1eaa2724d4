"""Who may call a route: the one dependency every `/api` route declares.

A route states its access with `require(permission)`, `signed_in()` or `public()`.
`tests/integration/test_route_permissions.py` walks every registered route and checks
the declared access against the spec's tables, so a route without one fails the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fastapi import Request
from fastapi.dependencies.models import Dependant
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.audit.log import Actor
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal, session_principal, token_principal
from zilean.auth.sessions import SESSION_COOKIE
from zilean.errors import ZileanError


class NotAuthenticated(ZileanError):
    """No valid session: browsers are sent to the login page."""


class InvalidApiToken(ZileanError):
    """invalid or expired token"""


class PasswordChangeRequired(ZileanError):
    """password change required"""


class Forbidden(ZileanError):
    """you do not have permission to perform this action"""


@dataclass(frozen=True)
class Access:
    permission: Permission | None = None
    public: bool = False
    # The two account routes a user with a temporary password may still use.
    allow_password_change: bool = False

    def describe(self) -> str:
        if self.public:
            return "public"
        return str(self.permission) if self.permission else "signed-in"


def client_ip(request: Request) -> str | None:
    return request.client.host if request.client else None


async def authenticate(request: Request) -> Principal:
    """Resolve the caller from `Authorization: Bearer <token>`, else the session cookie.

    Only the Bearer scheme is ours. A header of any other scheme (a reverse proxy's own
    `Basic` credentials, say) is not meant for us and is ignored, so a signed-in browser
    behind such a proxy keeps its session. A Bearer header is decisive: a bad token is a
    401 even beside a valid session, since a script that sends one means it.
    """
    engine: AsyncEngine = request.app.state.engine
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        if not credential.strip():
            raise InvalidApiToken()
        async with engine.begin() as conn:
            principal = await token_principal(conn, credential.strip())
        if principal is None:
            raise InvalidApiToken()
        return principal
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise NotAuthenticated()
    async with engine.connect() as conn:
        session = await session_principal(conn, cookie)
    if session is None:
        raise NotAuthenticated()
    return session


class Authorize:
    """A FastAPI dependency that enforces one `Access` and returns the caller."""

    def __init__(self, access: Access) -> None:
        self.access = access

    async def __call__(self, request: Request) -> Principal | None:
        if self.access.public:
            return None
        principal = await authenticate(request)
        if principal.must_change_password and not self.access.allow_password_change:
            raise PasswordChangeRequired()
        if self.access.permission is not None and not principal.can(self.access.permission):
            raise Forbidden()
        request.state.principal = principal
        return principal


def authorizers(dependant: Dependant) -> Iterator[Authorize]:
    """Every `Authorize` in a route's dependency tree: what it declares about its callers."""
    for dependency in dependant.dependencies:
        if isinstance(dependency.call, Authorize):
            yield dependency.call
        yield from authorizers(dependency)


def require(permission: Permission) -> Authorize:
    return Authorize(Access(permission=permission))


def signed_in(*, allow_password_change: bool = False) -> Authorize:
    return Authorize(Access(allow_password_change=allow_password_change))


def public() -> Authorize:
    return Authorize(Access(public=True))


def actor_of(request: Request, principal: Principal) -> Actor:
    return Actor(user_id=principal.user_id, email=principal.email, ip=client_ip(request))
