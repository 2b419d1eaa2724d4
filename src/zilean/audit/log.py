"""Record audit entries. Every audited write calls `record` inside its own transaction,
so an action and its entry commit together or not at all."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import audit_log

MASK = "***"
# Keys whose string values are secrets, masked at every depth of a snapshot. Callers mask
# values that are secret for other reasons (a secret global variable's `value`).
SECRET_KEYS = frozenset(
    {"password", "password_hash", "temp_password", "token", "secret", "api_key", "authorization"}
)
SECRET_SUFFIXES = ("_secret", "_token", "_api_key")


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return lowered in SECRET_KEYS or lowered.endswith(SECRET_SUFFIXES)


@dataclass(frozen=True)
class Actor:
    """Who acted: a user (by id and email, kept even after the user is deleted) and from where."""

    user_id: uuid.UUID | None
    email: str | None
    ip: str | None


# The operator at the machine, not a user: start-up seeding and the CLI's commands.
CONSOLE = Actor(user_id=None, email=None, ip=None)


def _has_content(value: Any) -> bool:
    """Flags (`is_secret: true`) and empty values say nothing secret; anything else might."""
    return not isinstance(value, bool) and value not in (None, "", [], {})


def mask_secrets(value: Any) -> Any:
    """Return a JSON-ready copy of `value` with every secret-looking key's value masked."""
    if isinstance(value, Mapping):
        return {
            str(key): (
                MASK
                if is_secret_key(str(key)) and _has_content(value[key])
                else mask_secrets(value[key])
            )
            for key in value
        }
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [mask_secrets(item) for item in items]
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


async def record(
    conn: AsyncConnection,
    actor: Actor,
    action: str,
    resource_type: str,
    resource_id: object | None = None,
    *,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> None:
    await conn.execute(
        insert(audit_log).values(
            actor_user_id=actor.user_id,
            actor_email=actor.email,
            action=action,
            resource_type=resource_type,
            resource_id=None if resource_id is None else str(resource_id),
            before=None if before is None else mask_secrets(before),
            after=None if after is None else mask_secrets(after),
            ip=actor.ip,
        )
    )
