"""Browser sessions: database rows keyed by the SHA-256 of a random cookie value."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import delete, func, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.auth.tokens import digest, new_token
from zilean.db.tables import sessions

SESSION_COOKIE = "zilean_session"
SESSION_TTL = timedelta(hours=24)  # from login; never extended by activity


async def create_session(
    conn: AsyncConnection, user_id: uuid.UUID, *, ip: str | None, user_agent: str | None
) -> str:
    """Store a new session for `user_id` and return the raw cookie value."""
    token = new_token()
    await conn.execute(
        insert(sessions).values(
            token_hash=digest(token),
            user_id=user_id,
            expires_at=func.now() + SESSION_TTL,
            ip=ip,
            user_agent=(user_agent or "")[:512] or None,
        )
    )
    return token


async def end_session(conn: AsyncConnection, raw_token: str) -> uuid.UUID | None:
    """Delete one session; return its user id, or None if it did not exist."""
    result = await conn.execute(
        delete(sessions)
        .where(sessions.c.token_hash == digest(raw_token))
        .returning(sessions.c.user_id)
    )
    return result.scalar_one_or_none()


async def revoke_user_sessions(
    conn: AsyncConnection, user_id: uuid.UUID, *, keep: str | None = None
) -> int:
    """Delete every session of a user, except the one whose raw token is `keep`."""
    query = delete(sessions).where(sessions.c.user_id == user_id)
    if keep is not None:
        query = query.where(sessions.c.token_hash != digest(keep))
    return (await conn.execute(query)).rowcount
