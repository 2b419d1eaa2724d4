"""Invites: an `invited` user row plus a 7-day single-use token, created in one transaction.

Resending (by the invitee's user id) mints a fresh token and expiry. The invitee sets a
password on the accept page and becomes `active`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from sqlalchemy import exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.auth.permissions import SystemRole
from zilean.auth.principal import Principal
from zilean.auth.roles import check_grantable, load_roles, resolve_role_ids
from zilean.auth.tokens import digest, new_token
from zilean.auth.users import (
    check_new_password,
    get_user,
    hash_in_thread,
    insert_user,
    list_users,
    normalise_email,
    set_roles,
)
from zilean.db.tables import invites, roles, user_roles, users
from zilean.errors import Conflict, InvalidInput

INVITE_TTL = timedelta(days=7)
ACCEPT_PATH = "/admin/accept-invite"


def invite_link(public_base_url: str, token: str) -> str:
    """Absolute when PUBLIC_BASE_URL is set, else the relative path the UI can show."""
    return f"{public_base_url}{ACCEPT_PATH}?token={quote(token)}"


async def _mint(
    conn: AsyncConnection, user_id: uuid.UUID, created_by: uuid.UUID
) -> tuple[dict[str, Any], str]:
    token = new_token()
    row = (
        (
            await conn.execute(
                insert(invites)
                .values(
                    id=uuid.uuid4(),
                    user_id=user_id,
                    token_hash=digest(token),
                    created_by=created_by,
                    expires_at=func.now() + INVITE_TTL,
                )
                .returning(invites.c.id, invites.c.created_at, invites.c.expires_at)
            )
        )
        .mappings()
        .one()
    )
    return dict(row), token


def _public(invite: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": invite["id"],
        "user_id": user["id"],
        "email": user["email"],
        "roles": user["roles"],
        "created_at": invite["created_at"],
        "expires_at": invite["expires_at"],
    }


async def create_invite(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    *,
    email: str,
    role_ids: Sequence[uuid.UUID],
    public_base_url: str,
) -> tuple[dict[str, Any], str]:
    """Create the invited user and its invite; return the invite and its link."""
    email = normalise_email(email)
    existing = (
        await conn.execute(select(users.c.status).where(func.lower(users.c.email) == email.lower()))
    ).scalar_one_or_none()
    if existing == "active":
        # Minting an invite for an active account would hand its takeover to the inviter.
        raise Conflict("this user is already active; an invite cannot be created for them")
    if existing is not None:
        raise Conflict(f"a user with this email already exists (status {existing})")
    role_list = await resolve_role_ids(conn, principal, role_ids)
    user_id = await insert_user(
        conn,
        email,
        status="invited",
        password_hash=None,
        must_change_password=False,
        is_super_admin=False,  # set on acceptance, if the roles include Super Admin
    )
    await set_roles(conn, user_id, role_list)
    invite, token = await _mint(conn, user_id, principal.user_id)
    user = await get_user(conn, user_id)
    public = _public(invite, user)
    await record(conn, actor, "invite.create", "user", user_id, after=public)
    return public, invite_link(public_base_url, token)


async def resend_invite(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    user_id: uuid.UUID,
    *,
    public_base_url: str,
) -> tuple[dict[str, Any], str]:
    """Mint a fresh token for an invited user (by user id), under the same grant rule."""
    user = await get_user(conn, user_id)
    if user["status"] != "invited":
        raise Conflict(f"only an invited user can be re-invited (status {user['status']})")
    held = await load_roles(conn, [role["id"] for role in user["roles"]])
    check_grantable(principal, held)
    # The newest link is the only live one: earlier links stop working now.
    await conn.execute(
        update(invites)
        .where(invites.c.user_id == user_id, invites.c.accepted_at.is_(None))
        .values(expires_at=func.least(invites.c.expires_at, func.now()))
    )
    invite, token = await _mint(conn, user_id, principal.user_id)
    public = _public(invite, user)
    await record(conn, actor, "invite.resend", "user", user_id, after=public)
    return public, invite_link(public_base_url, token)


async def pending_invites(conn: AsyncConnection) -> list[dict[str, Any]]:
    """The newest invite of every user still `invited`, newest first."""
    ranked = (
        select(
            invites,
            func.row_number()
            .over(partition_by=invites.c.user_id, order_by=invites.c.created_at.desc())
            .label("rank"),
        )
        .join(users, users.c.id == invites.c.user_id)
        .where(users.c.status == "invited", invites.c.accepted_at.is_(None))
        .subquery()
    )
    rows = (await conn.execute(select(ranked).where(ranked.c.rank == 1))).mappings().all()
    by_user = {user["id"]: user for user in await _users(conn, [row["user_id"] for row in rows])}
    now = (await conn.execute(select(func.now()))).scalar_one()
    listed = [
        {**_public(dict(row), by_user[row["user_id"]]), "expired": row["expires_at"] <= now}
        for row in rows
    ]
    return sorted(listed, key=lambda item: item["created_at"], reverse=True)


async def _users(conn: AsyncConnection, user_ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    return await list_users(conn, user_ids) if user_ids else []


@dataclass(frozen=True)
class ValidInvite:
    invite_id: uuid.UUID
    user_id: uuid.UUID
    email: str


async def find_valid_invite(conn: AsyncConnection, token: str) -> ValidInvite | None:
    """Return the invite a token opens, or None when it is unknown, used or expired."""
    row = (
        await conn.execute(
            select(invites.c.id, users.c.id, users.c.email)
            .join(users, users.c.id == invites.c.user_id)
            .where(
                invites.c.token_hash == digest(token),
                invites.c.accepted_at.is_(None),
                invites.c.expires_at > func.now(),
                users.c.status == "invited",
            )
        )
    ).first()
    return None if row is None else ValidInvite(row[0], row[1], row[2])


async def accept_invite(conn: AsyncConnection, token: str, password: str, *, ip: str | None) -> str:
    """Set the invitee's password and activate them; return their email.

    The conditional update makes a double submit safe: the second finds no invited user.
    """
    check_new_password(password, field="password")
    invite = await find_valid_invite(conn, token)
    if invite is None:
        raise InvalidInput("this invite link is invalid or has expired")
    activated = await conn.execute(
        update(users)
        .where(users.c.id == invite.user_id, users.c.status == "invited")
        .values(
            status="active",
            password_hash=await hash_in_thread(password),
            must_change_password=False,
            # Accepting an invite into the Super Admin role is what grants the flag.
            is_super_admin=exists()
            .where(user_roles.c.user_id == users.c.id)
            .where(user_roles.c.role_id == roles.c.id)
            .where(roles.c.system_key == str(SystemRole.SUPER_ADMIN)),
            updated_at=func.now(),
        )
    )
    if activated.rowcount != 1:  # another request accepted it first
        raise InvalidInput("this invite link is invalid or has expired")
    await conn.execute(
        update(invites).where(invites.c.user_id == invite.user_id).values(accepted_at=func.now())
    )
    await record(
        conn, Actor(invite.user_id, invite.email, ip), "invite.accept", "user", invite.user_id
    )
    return invite.email
