"""Who is calling: a user reached through a session cookie or an API token.

Each lookup is one query that joins the credential, the user and the union of the
user's role permissions. A credential whose user is no longer active resolves to nothing,
so disabling a user ends their access at once, whatever rows remain.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.auth.permissions import ALL_PERMISSIONS, Permission, known_permissions
from zilean.auth.tokens import digest

TOKEN_LAST_USED_GRANULARITY = 60  # seconds: last_used_at is written at most this often


class Credential(StrEnum):
    SESSION = "session"  # the zilean_session cookie
    API_TOKEN = "api_token"  # noqa: S105 - Authorization: Bearer zat_...
    MCP_TOKEN = "mcp_token"  # noqa: S105 - Authorization: Bearer zmcp_... on /mcp only
    CONSOLE = "console"  # the operator at the machine: start-up seeding (SEED_JOB)


@dataclass(frozen=True)
class Principal:
    user_id: uuid.UUID
    email: str
    is_super_admin: bool
    is_bootstrap: bool
    must_change_password: bool
    granted: frozenset[Permission]
    credential: Credential
    token_id: uuid.UUID | None = None

    def can(self, permission: Permission) -> bool:
        """Check one permission; the super-admin flag allows everything without a lookup."""
        return self.is_super_admin or permission in self.granted

    @property
    def permissions(self) -> frozenset[Permission]:
        """Every permission this caller holds, enumerated (all keys for a Super Admin)."""
        return ALL_PERMISSIONS if self.is_super_admin else self.granted


_SESSION_PRINCIPAL = text(
    """
    SELECT u.id, u.email, u.is_super_admin, u.is_bootstrap, u.must_change_password,
           array_remove(array_agg(DISTINCT rp.permission), NULL) AS permissions
    FROM sessions s
    JOIN users u ON u.id = s.user_id AND u.status = 'active'
    LEFT JOIN user_roles ur ON ur.user_id = u.id
    LEFT JOIN role_permissions rp ON rp.role_id = ur.role_id
    WHERE s.token_hash = :token_hash AND s.expires_at > now()
    GROUP BY u.id
    """
)

# A token acts with its role's permissions, never beyond what its owner holds now,
# and never as a Super Admin.
_TOKEN_PRINCIPAL = text(
    """
    WITH token AS (
        SELECT id, user_id, role_id FROM api_tokens
        WHERE token_hash = :token_hash AND revoked_at IS NULL
          AND (expires_at IS NULL OR expires_at > now())
    ), touched AS (
        UPDATE api_tokens SET last_used_at = now()
        WHERE id = (SELECT id FROM token)
          AND (last_used_at IS NULL
               OR last_used_at < now() - make_interval(secs => :granularity))
    )
    SELECT t.id AS token_id, u.id, u.email, u.is_super_admin, u.must_change_password,
           ARRAY(SELECT permission FROM role_permissions WHERE role_id = t.role_id)
               AS token_permissions,
           ARRAY(SELECT DISTINCT rp.permission FROM user_roles ur
                 JOIN role_permissions rp ON rp.role_id = ur.role_id
                 WHERE ur.user_id = u.id) AS owner_permissions
    FROM token t
    JOIN users u ON u.id = t.user_id AND u.status = 'active'
    """
)


async def session_principal(conn: AsyncConnection, raw_token: str) -> Principal | None:
    row = (
        (await conn.execute(_SESSION_PRINCIPAL, {"token_hash": digest(raw_token)}))
        .mappings()
        .first()
    )
    if row is None:
        return None
    return Principal(
        user_id=row["id"],
        email=row["email"],
        is_super_admin=row["is_super_admin"],
        is_bootstrap=row["is_bootstrap"],
        must_change_password=row["must_change_password"],
        granted=known_permissions(row["permissions"]),
        credential=Credential.SESSION,
    )


async def token_principal(conn: AsyncConnection, raw_token: str) -> Principal | None:
    row = (
        (
            await conn.execute(
                _TOKEN_PRINCIPAL,
                {"token_hash": digest(raw_token), "granularity": TOKEN_LAST_USED_GRANULARITY},
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    token_permissions = known_permissions(row["token_permissions"])
    owner = (
        ALL_PERMISSIONS if row["is_super_admin"] else known_permissions(row["owner_permissions"])
    )
    return Principal(
        user_id=row["id"],
        email=row["email"],
        is_super_admin=False,
        is_bootstrap=False,
        must_change_password=row["must_change_password"],
        granted=token_permissions & owner,
        credential=Credential.API_TOKEN,
        token_id=row["token_id"],
    )
