"""Personal API tokens: automation without a browser (beyond the spec).

A token is bound to one role that must not exceed its creator's permissions (and is never
the Super Admin role); at use it acts with that role's permissions, capped by what the
owner holds at that moment. The raw value is shown once; only its digest is stored.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Credential, Principal
from zilean.auth.roles import Role, check_grantable, load_roles
from zilean.auth.tokens import digest, new_token
from zilean.db.tables import api_tokens, roles, users
from zilean.errors import InvalidInput, NotFound, PermissionDenied

TOKEN_PREFIX = "zat_"  # noqa: S105 - a prefix, not a secret
MAX_TOKEN_NAME = 100
EXPIRIES: dict[str, timedelta | None] = {
    "30d": timedelta(days=30),
    "90d": timedelta(days=90),
    "365d": timedelta(days=365),
    "never": None,
}


def _columns() -> list[Any]:
    return [
        api_tokens.c.id,
        api_tokens.c.name,
        api_tokens.c.user_id,
        users.c.email.label("user_email"),
        api_tokens.c.role_id,
        roles.c.name.label("role_name"),
        api_tokens.c.token_hint,
        api_tokens.c.created_at,
        api_tokens.c.expires_at,
        api_tokens.c.last_used_at,
        api_tokens.c.revoked_at,
    ]


def _joined() -> Any:
    return api_tokens.join(users, users.c.id == api_tokens.c.user_id).join(
        roles, roles.c.id == api_tokens.c.role_id
    )


async def list_tokens(
    conn: AsyncConnection, principal: Principal, *, everyone: bool
) -> list[dict[str, Any]]:
    """The caller's tokens, or every user's when `everyone` (needs users:write)."""
    query = select(*_columns()).select_from(_joined()).order_by(api_tokens.c.created_at.desc())
    if everyone:
        if not principal.can(Permission.USERS_WRITE):
            raise PermissionDenied()
    else:
        query = query.where(api_tokens.c.user_id == principal.user_id)
    return [dict(row) for row in (await conn.execute(query)).mappings().all()]


async def check_token_request(
    conn: AsyncConnection,
    principal: Principal,
    *,
    name: str,
    role_id: uuid.UUID,
    expires_in: str,
    kind: str,
) -> tuple[str, Role]:
    """Check a request for a role-bound token (API or MCP); return its trimmed name and role.

    The role must exist, must not be Super Admin, and must be one the caller could grant.
    """
    name = name.strip()
    if not name or len(name) > MAX_TOKEN_NAME:
        raise InvalidInput(f"name is required and must be at most {MAX_TOKEN_NAME} characters")
    if expires_in not in EXPIRIES:
        raise InvalidInput("expires_in: must be one of 30d, 90d, 365d or never")
    found = await load_roles(conn, [role_id])
    if not found:
        raise InvalidInput("role_id: unknown role")
    role = found[0]
    if role.is_super_admin:
        raise PermissionDenied(f"{kind} cannot be bound to the Super Admin role")
    check_grantable(principal, [role])
    return name, role


async def create_token(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    *,
    name: str,
    role_id: uuid.UUID,
    expires_in: str,
) -> tuple[dict[str, Any], str]:
    if principal.credential is Credential.API_TOKEN:
        raise PermissionDenied("API tokens cannot create other tokens; sign in to do this")
    name, role = await check_token_request(
        conn, principal, name=name, role_id=role_id, expires_in=expires_in, kind="a token"
    )
    secret = new_token(TOKEN_PREFIX)
    ttl = EXPIRIES[expires_in]
    token_id = uuid.uuid4()
    await conn.execute(
        insert(api_tokens).values(
            id=token_id,
            user_id=principal.user_id,
            role_id=role.id,
            name=name,
            token_hash=digest(secret),
            token_hint=secret[-4:],
            expires_at=None if ttl is None else func.now() + ttl,
        )
    )
    token = await _get(conn, token_id)
    await record(conn, actor, "api_token.create", "api_token", token_id, after=token)
    return token, secret


async def _get(conn: AsyncConnection, token_id: uuid.UUID) -> dict[str, Any]:
    row = (
        (
            await conn.execute(
                select(*_columns()).select_from(_joined()).where(api_tokens.c.id == token_id)
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound("token not found")
    return dict(row)


async def revoke_token(
    conn: AsyncConnection, principal: Principal, actor: Actor, token_id: uuid.UUID
) -> None:
    """Revoke one's own token, or anyone's with users:write. Revoking twice is harmless."""
    token = await _get(conn, token_id)
    if token["user_id"] != principal.user_id and not principal.can(Permission.USERS_WRITE):
        raise NotFound("token not found")  # do not reveal other users' token ids
    if token["revoked_at"] is not None:
        return
    await conn.execute(
        update(api_tokens).where(api_tokens.c.id == token_id).values(revoked_at=func.now())
    )
    await record(conn, actor, "api_token.revoke", "api_token", token_id, before=token)
