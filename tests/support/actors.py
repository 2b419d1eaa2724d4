"""A named cast for permission tests, each with a real session on a real database.

- alice: the bootstrap Super Admin (protected)
- bob: an Admin
- carol: Read-Only
- dave: a custom role holding users:read, users:write, roles:read and invites:create
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI
from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.auth.bootstrap import seed_super_admin
from zilean.auth.passwords import hash_password
from zilean.auth.permissions import Permission, SystemRole
from zilean.auth.roles import system_role_id
from zilean.auth.sessions import SESSION_COOKIE, create_session
from zilean.auth.users import insert_user
from zilean.db.tables import role_permissions, roles, user_roles, users

PASSWORD = "correct horse battery"
_HASH = hash_password(PASSWORD)  # computed once per test session
DAVE_PERMISSIONS = (
    Permission.USERS_READ,
    Permission.USERS_WRITE,
    Permission.ROLES_READ,
    Permission.INVITES_CREATE,
)


@dataclass(frozen=True)
class Actor:
    name: str
    email: str
    user_id: uuid.UUID
    session: str


@dataclass(frozen=True)
class Cast:
    alice: Actor
    bob: Actor
    carol: Actor
    dave: Actor
    role_ids: dict[str, uuid.UUID]  # "super_admin", "admin", "read_only", "dave"


async def add_user(
    engine: AsyncEngine,
    email: str,
    role_ids: list[uuid.UUID],
    *,
    super_admin: bool = False,
    must_change_password: bool = False,
) -> uuid.UUID:
    async with engine.begin() as conn:
        user_id = await insert_user(
            conn,
            email,
            status="active",
            password_hash=_HASH,
            must_change_password=must_change_password,
            is_super_admin=super_admin,
        )
        await conn.execute(
            insert(user_roles), [{"user_id": user_id, "role_id": r} for r in role_ids]
        )
    return user_id


async def sign_in_directly(engine: AsyncEngine, user_id: uuid.UUID) -> str:
    async with engine.begin() as conn:
        return await create_session(conn, user_id, ip="127.0.0.1", user_agent="tests")


async def build_cast(engine: AsyncEngine) -> Cast:
    async with engine.begin() as conn:
        await seed_super_admin(conn, "alice@example.com", _HASH)
        ids = {key: await system_role_id(conn, SystemRole(key)) for key in SystemRole}
        dave_role = uuid.uuid4()
        await conn.execute(insert(roles).values(id=dave_role, name="User managers"))
        await conn.execute(
            insert(role_permissions),
            [{"role_id": dave_role, "permission": str(p)} for p in DAVE_PERMISSIONS],
        )
        alice_id = (
            await conn.execute(
                update(users)
                .where(users.c.is_bootstrap)
                .values(email="alice@example.com")
                .returning(users.c.id)
            )
        ).scalar_one()
    role_ids = {**{str(k): v for k, v in ids.items()}, "dave": dave_role}
    bob = await add_user(engine, "bob@example.com", [role_ids["admin"]])
    carol = await add_user(engine, "carol@example.com", [role_ids["read_only"]])
    dave = await add_user(engine, "dave@example.com", [dave_role])

    async def actor(name: str, user_id: uuid.UUID) -> Actor:
        return Actor(name, f"{name}@example.com", user_id, await sign_in_directly(engine, user_id))

    return Cast(
        alice=await actor("alice", alice_id),
        bob=await actor("bob", bob),
        carol=await actor("carol", carol),
        dave=await actor("dave", dave),
        role_ids=role_ids,
    )


@asynccontextmanager
async def client_for(app: FastAPI, session: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client; with a session, it sends that session's cookie."""
    transport = httpx.ASGITransport(app=app)
    cookies = {SESSION_COOKIE: session} if session else None
    async with httpx.AsyncClient(
        transport=transport, base_url="http://zilean.test", cookies=cookies
    ) as client:
        yield client
