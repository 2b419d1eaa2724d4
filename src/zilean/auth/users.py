"""User accounts: creation with a temporary password, role and status changes, resets,
deletion and self-service password changes. Every change is audited in its transaction.

The bootstrap Super Admin is protected: role changes, status changes, deletion and admin
password resets against it are refused (409) whoever asks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.auth.passwords import MAX_PASSWORD_BYTES, hash_password, verify_password
from zilean.auth.principal import Principal
from zilean.auth.roles import Role, check_manageable, load_roles, resolve_role_ids
from zilean.auth.sessions import revoke_user_sessions
from zilean.auth.tokens import temporary_password
from zilean.db.tables import user_roles, users
from zilean.errors import Conflict, InvalidInput, NotFound

MIN_PASSWORD_LENGTH = 8
MAX_EMAIL_LENGTH = 254
USER_STATUSES = ("active", "disabled")  # what an admin may set; `invited` ends on acceptance


def normalise_email(email: str) -> str:
    email = email.strip()
    local, at, domain = email.rpartition("@")
    if not at or not local or not domain or " " in email or len(email) > MAX_EMAIL_LENGTH:
        raise InvalidInput("email: must be a valid email address")
    return email


def check_new_password(password: str, field: str = "new_password") -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"{field}: must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password.encode("utf-8")) > MAX_PASSWORD_BYTES:
        raise InvalidInput(f"{field}: must be at most {MAX_PASSWORD_BYTES} bytes")


async def hash_in_thread(password: str) -> str:
    return await asyncio.to_thread(hash_password, password)


async def list_users(
    conn: AsyncConnection, user_ids: Sequence[uuid.UUID] | None = None
) -> list[dict[str, Any]]:
    # MCP tokens' hidden accounts are not users anyone manages: unlisted, and a 404 by id.
    query = (
        select(
            users.c.id,
            users.c.email,
            users.c.status,
            users.c.is_super_admin,
            users.c.is_bootstrap,
            users.c.must_change_password,
            users.c.created_at,
            users.c.last_login_at,
        )
        .where(users.c.is_service_account.is_(False))
        .order_by(func.lower(users.c.email))
    )
    if user_ids is not None:
        query = query.where(users.c.id.in_(list(user_ids)))
    rows = (await conn.execute(query)).mappings().all()
    links = (
        await conn.execute(
            select(user_roles.c.user_id, user_roles.c.role_id).where(
                user_roles.c.user_id.in_([row["id"] for row in rows])
            )
        )
    ).all()
    role_names = {role.id: role for role in await load_roles(conn)}
    held: dict[uuid.UUID, list[Role]] = {}
    for user_id, role_id in links:
        held.setdefault(user_id, []).append(role_names[role_id])
    return [
        {
            "id": row["id"],
            "email": row["email"],
            "status": row["status"],
            "is_super_admin": row["is_super_admin"],
            "protected": row["is_bootstrap"],
            "must_change_password": row["must_change_password"],
            "roles": [
                {"id": role.id, "name": role.name}
                for role in sorted(held.get(row["id"], []), key=lambda r: r.name.lower())
            ],
            "created_at": row["created_at"],
            "last_login_at": row["last_login_at"],
        }
        for row in rows
    ]


async def get_user(conn: AsyncConnection, user_id: uuid.UUID) -> dict[str, Any]:
    found = await list_users(conn, [user_id])
    if not found:
        raise NotFound("user not found")
    return found[0]


async def set_roles(conn: AsyncConnection, user_id: uuid.UUID, role_list: Sequence[Role]) -> None:
    """Replace a user's roles; holding the Super Admin role is what sets the flag."""
    await conn.execute(delete(user_roles).where(user_roles.c.user_id == user_id))
    await conn.execute(
        insert(user_roles), [{"user_id": user_id, "role_id": role.id} for role in role_list]
    )


async def insert_user(
    conn: AsyncConnection,
    email: str,
    *,
    status: str,
    password_hash: str | None,
    must_change_password: bool,
    is_super_admin: bool,
) -> uuid.UUID:
    user_id = uuid.uuid4()
    try:
        async with conn.begin_nested():
            await conn.execute(
                insert(users).values(
                    id=user_id,
                    email=email,
                    status=status,
                    password_hash=password_hash,
                    must_change_password=must_change_password,
                    is_super_admin=is_super_admin,
                )
            )
    except IntegrityError:
        raise Conflict("a user with this email already exists") from None
    return user_id


async def create_user(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    *,
    email: str,
    role_ids: Sequence[uuid.UUID],
) -> tuple[dict[str, Any], str]:
    """Create an active user who must change the returned temporary password at first login."""
    email = normalise_email(email)
    role_list = await resolve_role_ids(conn, principal, role_ids)
    password = temporary_password()
    user_id = await insert_user(
        conn,
        email,
        status="active",
        password_hash=await hash_in_thread(password),
        must_change_password=True,
        is_super_admin=any(role.is_super_admin for role in role_list),
    )
    await set_roles(conn, user_id, role_list)
    user = await get_user(conn, user_id)
    await record(conn, actor, "user.create", "user", user_id, after=user)
    return user, password


def _refuse_if_protected(user: dict[str, Any], what: str) -> None:
    if user["protected"]:
        raise Conflict(f"the bootstrap Super Admin's {what} cannot be changed")


async def _check_manageable(
    conn: AsyncConnection, principal: Principal, user: dict[str, Any]
) -> None:
    await check_manageable(conn, principal, [role["id"] for role in user["roles"]])


async def update_user(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    user_id: uuid.UUID,
    *,
    role_ids: Sequence[uuid.UUID] | None,
    status: str | None,
) -> dict[str, Any]:
    before = await get_user(conn, user_id)
    # The bootstrap protection answers 409 whoever asks, before any permission question.
    if role_ids is not None:
        _refuse_if_protected(before, "roles")
    if status is not None and status != before["status"]:
        _refuse_if_protected(before, "status")
    if role_ids is not None or status is not None:
        await _check_manageable(conn, principal, before)
    if role_ids is not None:
        role_list = await resolve_role_ids(conn, principal, role_ids)
        await set_roles(conn, user_id, role_list)
        await conn.execute(
            update(users)
            .where(users.c.id == user_id)
            .values(
                is_super_admin=any(role.is_super_admin for role in role_list),
                updated_at=func.now(),
            )
        )
        after = await get_user(conn, user_id)
        await record(
            conn,
            actor,
            "user.role_change",
            "user",
            user_id,
            before={"roles": before["roles"], "is_super_admin": before["is_super_admin"]},
            after={"roles": after["roles"], "is_super_admin": after["is_super_admin"]},
        )
    if status is not None and status != before["status"]:
        if status not in USER_STATUSES:
            raise InvalidInput("status: must be exactly active or disabled")
        if user_id == principal.user_id:
            raise Conflict("you cannot change the status of your own account")
        if before["status"] == "invited" and status == "active":
            raise Conflict("an invited user becomes active by accepting their invite")
        await conn.execute(
            update(users).where(users.c.id == user_id).values(status=status, updated_at=func.now())
        )
        if status == "disabled":
            await revoke_user_sessions(conn, user_id)
        await record(
            conn,
            actor,
            "user.status_change",
            "user",
            user_id,
            before={"status": before["status"]},
            after={"status": status},
        )
    elif status is not None and status not in USER_STATUSES:
        raise InvalidInput("status: must be exactly active or disabled")
    return await get_user(conn, user_id)


async def reset_password(
    conn: AsyncConnection, principal: Principal, actor: Actor, user_id: uuid.UUID
) -> str:
    """Give the user a new temporary password, end their sessions, return the password once."""
    user = await get_user(conn, user_id)
    _refuse_if_protected(user, "password")
    await _check_manageable(conn, principal, user)
    return await set_password(conn, actor, user, by="admin")


async def set_password(
    conn: AsyncConnection,
    actor: Actor,
    user: dict[str, Any],
    *,
    by: str,
    password: str | None = None,
) -> str:
    """Give `user` `password`, or a temporary one they must change at sign-in; return it.

    Every session of theirs ends and the reset is audited (`by` says who asked), in the
    caller's transaction. Callers decide who may reset whom; an invited user has no
    password to reset (they set one by accepting their invite).
    """
    if user["status"] == "invited":
        raise Conflict("this user has not accepted their invite yet; resend it instead")
    if password is not None:
        check_new_password(password, "password")
    chosen = password or temporary_password()
    await conn.execute(
        update(users)
        .where(users.c.id == user["id"])
        .values(
            password_hash=await hash_in_thread(chosen),
            must_change_password=password is None,
            updated_at=func.now(),
        )
    )
    await revoke_user_sessions(conn, user["id"])
    await record(conn, actor, "user.password_reset", "user", user["id"], after={"by": by})
    return chosen


async def delete_user(
    conn: AsyncConnection, principal: Principal, actor: Actor, user_id: uuid.UUID
) -> None:
    user = await get_user(conn, user_id)
    _refuse_if_protected(user, "account")
    await _check_manageable(conn, principal, user)
    if user_id == principal.user_id:
        raise Conflict("you cannot delete your own account")
    # Sessions, invites, role links and API tokens go with the row (ON DELETE CASCADE).
    await conn.execute(delete(users).where(users.c.id == user_id))
    await record(conn, actor, "user.delete", "user", user_id, before=user)


async def change_own_password(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    *,
    current_password: str,
    new_password: str,
    keep_session: str | None,
) -> None:
    """Change the caller's password; other sessions of theirs end, this one stays."""
    stored = (
        await conn.execute(select(users.c.password_hash).where(users.c.id == principal.user_id))
    ).scalar_one_or_none()
    if not stored or not await asyncio.to_thread(verify_password, current_password, stored):
        raise InvalidInput("current_password is incorrect")
    check_new_password(new_password)
    if new_password == current_password:
        raise InvalidInput("new_password: must differ from the current password")
    await conn.execute(
        update(users)
        .where(users.c.id == principal.user_id)
        .values(
            password_hash=await hash_in_thread(new_password),
            must_change_password=False,
            updated_at=func.now(),
        )
    )
    await revoke_user_sessions(conn, principal.user_id, keep=keep_session)
    await record(
        conn, actor, "user.password_reset", "user", principal.user_id, after={"by": "self"}
    )
