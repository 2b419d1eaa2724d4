"""MCP tokens: issuing, listing and deleting them (core), and resolving one at `/mcp`.

A token is backed by a hidden service account that holds the token's role, so whatever
the token does is recorded under that account: the audit log names the exact token, not
a shared identity. The account has no password and is never listed as a user; deleting
the token deletes it. The role follows the same grant rule as users and API tokens (never
Super Admin, never beyond the issuer's own permissions), and a token acts with that
role's permissions as they are at each call. Only the token's SHA-256 digest is stored.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.auth.api_tokens import EXPIRIES, check_token_request
from zilean.auth.permissions import known_permissions
from zilean.auth.principal import TOKEN_LAST_USED_GRANULARITY, Credential, Principal
from zilean.auth.tokens import digest, new_token
from zilean.db.tables import mcp_tokens, roles, user_roles, users
from zilean.errors import NotFound

TOKEN_PREFIX = "zmcp_"  # noqa: S105 - a prefix, not a secret
TOKEN_HINT_LENGTH = 4
# The service account's address: unique per token, and undeliverable by construction.
ACCOUNT_EMAIL = "mcp-token-{token_id}@zilean.invalid"


def _columns() -> list[Any]:
    return [
        mcp_tokens.c.id,
        mcp_tokens.c.name,
        roles.c.id.label("role_id"),
        roles.c.name.label("role_name"),
        mcp_tokens.c.user_id.label("account_id"),
        users.c.email.label("account_email"),
        mcp_tokens.c.token_hint,
        mcp_tokens.c.created_at,
        mcp_tokens.c.expires_at,
        mcp_tokens.c.last_used_at,
    ]


def _joined() -> Any:
    return (
        mcp_tokens.join(users, users.c.id == mcp_tokens.c.user_id)
        .join(user_roles, user_roles.c.user_id == mcp_tokens.c.user_id)
        .join(roles, roles.c.id == user_roles.c.role_id)
    )


async def list_tokens(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every MCP token, newest first; never the token itself."""
    query = select(*_columns()).select_from(_joined()).order_by(mcp_tokens.c.created_at.desc())
    return [dict(row) for row in (await conn.execute(query)).mappings().all()]


async def _get(conn: AsyncConnection, token_id: uuid.UUID) -> dict[str, Any]:
    query = select(*_columns()).select_from(_joined()).where(mcp_tokens.c.id == token_id)
    row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise NotFound("MCP token not found")
    return dict(row)


async def create_token(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    *,
    name: str,
    role_id: uuid.UUID,
    expires_in: str,
) -> tuple[dict[str, Any], str]:
    """Issue a token and its service account; return the token's view and its plaintext."""
    name, role = await check_token_request(
        conn, principal, name=name, role_id=role_id, expires_in=expires_in, kind="an MCP token"
    )
    token_id, account_id = uuid.uuid4(), uuid.uuid4()
    await conn.execute(
        insert(users).values(
            id=account_id,
            email=ACCOUNT_EMAIL.format(token_id=token_id),
            status="active",
            password_hash=None,
            is_service_account=True,
        )
    )
    await conn.execute(insert(user_roles).values(user_id=account_id, role_id=role.id))
    secret = new_token(TOKEN_PREFIX)
    ttl = EXPIRIES[expires_in]
    await conn.execute(
        insert(mcp_tokens).values(
            id=token_id,
            user_id=account_id,
            name=name,
            token_hash=digest(secret),
            token_hint=secret[-TOKEN_HINT_LENGTH:],
            created_by=principal.user_id,
            expires_at=None if ttl is None else func.now() + ttl,
        )
    )
    token = await _get(conn, token_id)
    await record(conn, actor, "mcp_token.create", "mcp_token", token_id, after=token)
    return token, secret


async def delete_token(conn: AsyncConnection, actor: Actor, token_id: uuid.UUID) -> None:
    """Revoke a token at once by deleting its service account (the token row goes with it)."""
    token = await _get(conn, token_id)
    await conn.execute(delete(users).where(users.c.id == token["account_id"]))
    await record(conn, actor, "mcp_token.delete", "mcp_token", token_id, before=token)


# A token that is known and unexpired, its account, and the account's role permissions.
# `last_used_at` is written at most once a minute, as for API tokens.
_MCP_PRINCIPAL = text(
    """
    WITH token AS (
        SELECT id, user_id FROM mcp_tokens
        WHERE token_hash = :token_hash AND (expires_at IS NULL OR expires_at > now())
    ), touched AS (
        UPDATE mcp_tokens SET last_used_at = now()
        WHERE id = (SELECT id FROM token)
          AND (last_used_at IS NULL
               OR last_used_at < now() - make_interval(secs => :granularity))
    )
    SELECT t.id AS token_id, u.id, u.email,
           ARRAY(SELECT DISTINCT rp.permission FROM user_roles ur
                 JOIN role_permissions rp ON rp.role_id = ur.role_id
                 WHERE ur.user_id = u.id) AS permissions
    FROM token t
    JOIN users u ON u.id = t.user_id AND u.status = 'active' AND u.is_service_account
    """
)


async def mcp_principal(conn: AsyncConnection, raw_token: str) -> Principal | None:
    """The service account a bearer token stands for, or None (unknown, revoked, expired)."""
    row = (
        (
            await conn.execute(
                _MCP_PRINCIPAL,
                {"token_hash": digest(raw_token), "granularity": TOKEN_LAST_USED_GRANULARITY},
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    return Principal(
        user_id=row["id"],
        email=row["email"],
        is_super_admin=False,
        is_bootstrap=False,
        must_change_password=False,
        granted=known_permissions(row["permissions"]),
        credential=Credential.MCP_TOKEN,
        token_id=row["token_id"],
    )
