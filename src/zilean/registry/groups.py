"""Job groups: `/`-separated names that nest, and the gate a disabled group puts on its jobs.

A job is gated when its own group or any ancestor group is disabled. The scheduler and
the workers ask the same question through `gated_clause` (inside their own queries) or
`is_group_gated`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, delete, exists, func, literal, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.db.tables import disabled_groups
from zilean.errors import InvalidInput

MAX_GROUP_BYTES = 255
MAX_GROUP_DEPTH = 16


def normalise_group_name(raw: str) -> str:
    """Trim every `/` segment and drop the blank ones: ` Ops / /Backups ` is `Ops/Backups`."""
    return "/".join(segment.strip() for segment in raw.split("/") if segment.strip())


def check_group_limits(name: str) -> None:
    if len(name.encode("utf-8")) > MAX_GROUP_BYTES:
        raise InvalidInput(f"group_name must be at most {MAX_GROUP_BYTES} bytes")
    if name and name.count("/") + 1 > MAX_GROUP_DEPTH:
        raise InvalidInput(f"group_name must be at most {MAX_GROUP_DEPTH} levels deep")


def valid_group_name(raw: str) -> str:
    name = normalise_group_name(raw)
    check_group_limits(name)
    return name


def gated_clause(group_column: Any) -> ColumnElement[bool]:
    """SQL true when the row's group, or an ancestor of it, is disabled."""
    return exists().where(
        or_(
            disabled_groups.c.group_name == group_column,
            func.starts_with(group_column, disabled_groups.c.group_name + literal("/")),
        )
    )


async def is_group_gated(conn: AsyncConnection, group_name: str) -> bool:
    if not group_name:
        return False
    gated = await conn.execute(select(gated_clause(literal(group_name))))
    return bool(gated.scalar_one())


async def disabled_group_names(conn: AsyncConnection) -> list[str]:
    rows = await conn.execute(select(disabled_groups.c.group_name).order_by("group_name"))
    return list(rows.scalars())


async def disable_group(conn: AsyncConnection, actor: Actor, raw: str) -> str:
    name = normalise_group_name(raw)
    if not name:
        raise InvalidInput("group_name is required")
    check_group_limits(name)
    added = await conn.execute(
        insert(disabled_groups).values(group_name=name).on_conflict_do_nothing()
    )
    if added.rowcount:
        await record(conn, actor, "group.disable", "group", name, after={"disabled": True})
    return name


async def enable_group(conn: AsyncConnection, actor: Actor, raw: str) -> str:
    """Re-enable a group. Any non-empty name is accepted, so a group disabled before the
    length and depth limits existed can still be enabled."""
    name = normalise_group_name(raw)
    if not name:
        raise InvalidInput("group_name is required")
    removed = await conn.execute(
        delete(disabled_groups).where(disabled_groups.c.group_name == name)
    )
    if removed.rowcount:
        await record(conn, actor, "group.enable", "group", name, after={"disabled": False})
    return name
