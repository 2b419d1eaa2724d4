"""Password sign-in. Every failure costs one bcrypt comparison and looks the same."""

from __future__ import annotations

import asyncio
import functools

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.audit.log import Actor, record
from zilean.auth.passwords import hash_password, verify_password
from zilean.auth.sessions import create_session, end_session
from zilean.db.tables import users

LOGIN_FAILED_MESSAGE = "Invalid email or password."


@functools.cache
def _dummy_hash() -> str:
    """A real bcrypt hash to compare against when the email is unknown, paying the same cost."""
    return hash_password("zilean-dummy-password-for-timing")


async def sign_in(
    engine: AsyncEngine, email: str, password: str, *, ip: str | None, user_agent: str | None
) -> str | None:
    """Return a new session token when the credentials match an active user, else None.

    A failure is audited only when the email belongs to a real user: recording unknown
    emails would turn the audit log into an email-enumeration oracle.
    """
    async with engine.connect() as conn:
        user = (
            (
                await conn.execute(
                    select(users.c.id, users.c.email, users.c.password_hash, users.c.status).where(
                        func.lower(users.c.email) == email.strip().lower()
                    )
                )
            )
            .mappings()
            .first()
        )
    stored = user["password_hash"] if user and user["password_hash"] else _dummy_hash()
    matches = await asyncio.to_thread(verify_password, password, stored)
    async with engine.begin() as conn:
        if user is None:
            return None
        actor = Actor(user_id=user["id"], email=user["email"], ip=ip)
        if not matches or user["status"] != "active" or not user["password_hash"]:
            await record(conn, actor, "auth.login_failed", "user", user["id"])
            return None
        token = await create_session(conn, user["id"], ip=ip, user_agent=user_agent)
        await conn.execute(
            update(users).where(users.c.id == user["id"]).values(last_login_at=func.now())
        )
        await record(conn, actor, "auth.login", "user", user["id"])
        return token


async def sign_out(engine: AsyncEngine, raw_token: str, *, ip: str | None) -> None:
    """End one session and audit it; an unknown or already-ended session is a no-op."""
    async with engine.begin() as conn:
        user_id = await end_session(conn, raw_token)
        if user_id is None:
            return
        email = (
            await conn.execute(select(users.c.email).where(users.c.id == user_id))
        ).scalar_one_or_none()
        await record(conn, Actor(user_id, email, ip), "auth.logout", "user", user_id)
