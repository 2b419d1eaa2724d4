"""`zilean reset-admin-password`: get back into an instance whose admin password is lost.

It works on the database `zilean up` uses: the embedded Postgres in the data directory
(even while `zilean up` is running on it), or DATABASE_URL when set. The reset is the
same one an admin makes from the API (sessions end, the entry is audited), minus the
bootstrap protection: only someone with the database at hand can run it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from zilean.audit.log import CONSOLE
from zilean.auth.users import get_user, set_password
from zilean.db.embedded import embedded_postgres
from zilean.db.engine import create_engine
from zilean.db.schema import schema_status
from zilean.db.tables import users
from zilean.errors import ConfigError, Conflict, NotFound


@dataclass(frozen=True)
class Reset:
    email: str
    password: str = field(repr=False)
    temporary: bool


def reset_admin_password(
    data_dir: Path,
    environ: Mapping[str, str],
    *,
    email: str | None = None,
    password: str | None = None,
) -> Reset:
    """Set a new password for `email`, or for the bootstrap Super Admin when it is None.

    Without `password`, a temporary one is generated that must be changed at sign-in.
    """
    with ExitStack() as stack:
        url = environ.get("DATABASE_URL")
        if not url:
            pgdata = data_dir / "postgres"
            # Never start a fresh, empty cluster: that would hide a mistyped --data-dir.
            if not (pgdata / "PG_VERSION").is_file():
                raise ConfigError(
                    f"no Zilean database in {data_dir}; pass the --data-dir that "
                    "`zilean up` uses, or set DATABASE_URL"
                )
            url = stack.enter_context(embedded_postgres(pgdata))
        reason = schema_status(url)
        if reason is not None:
            raise ConfigError(
                f"the database is not ready ({reason}); run `zilean up` or `zilean migrate` first"
            )
        return asyncio.run(_reset(url, email, password))


async def _reset(url: str, email: str | None, password: str | None) -> Reset:
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.begin() as conn:
            if email is None:
                query = select(users.c.id).where(users.c.is_bootstrap)
                missing = "no Super Admin exists yet: the first `zilean up` creates one"
            else:
                query = select(users.c.id).where(func.lower(users.c.email) == email.lower())
                missing = f"no user has the email {email}"
            user_id: uuid.UUID | None = (await conn.execute(query)).scalar_one_or_none()
            if user_id is None:
                raise NotFound(missing)
            user = await get_user(conn, user_id)
            if user["status"] == "disabled":
                raise Conflict(f"{user['email']} is disabled; enable the account first")
            chosen = await set_password(conn, CONSOLE, user, by="console", password=password)
    finally:
        await engine.dispose()
    return Reset(email=user["email"], password=chosen, temporary=password is None)
