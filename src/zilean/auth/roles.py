"""Roles: named permission sets, three of them seeded and protected.

The grant rule lives here: only a Super Admin may hand out the Super Admin role or any
role whose permissions exceed the caller's own. Users, invites, resends, role edits and
API tokens all go through `check_grantable`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.auth.permissions import Permission, SystemRole, known_permissions
from zilean.auth.principal import Principal
from zilean.db.tables import api_tokens, role_permissions, roles, user_roles, users
from zilean.errors import Conflict, InvalidInput, NotFound, PermissionDenied

MAX_ROLE_NAME = 100


@dataclass(frozen=True)
class Role:
    id: uuid.UUID
    name: str
    description: str
    system_key: SystemRole | None
    permissions: frozenset[Permission]

    @property
    def is_super_admin(self) -> bool:
        return self.system_key is SystemRole.SUPER_ADMIN

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "is_system": self.system_key is not None,
            "system_key": None if self.system_key is None else str(self.system_key),
            "permissions": sorted(self.permissions),
        }


async def load_roles(
    conn: AsyncConnection, role_ids: Iterable[uuid.UUID] | None = None
) -> list[Role]:
    """Load roles (all, or the given ids) with their permissions, ordered by name."""
    query = (
        select(
            roles.c.id,
            roles.c.name,
            roles.c.description,
            roles.c.system_key,
            func.array_remove(func.array_agg(role_permissions.c.permission), None).label(
                "permissions"
            ),
        )
        .select_from(roles.outerjoin(role_permissions))
        .group_by(roles.c.id)
        .order_by(func.lower(roles.c.name))
    )
    if role_ids is not None:
        query = query.where(roles.c.id.in_(list(role_ids)))
    rows = (await conn.execute(query)).mappings().all()
    return [
        Role(
            id=row["id"],
            name=row["name"],
            description=row["description"],
            system_key=None if row["system_key"] is None else SystemRole(row["system_key"]),
            permissions=known_permissions(row["permissions"]),
        )
        for row in rows
    ]


async def system_role_id(conn: AsyncConnection, key: SystemRole) -> uuid.UUID:
    role_id: uuid.UUID = (
        await conn.execute(select(roles.c.id).where(roles.c.system_key == str(key)))
    ).scalar_one()
    return role_id


def check_grantable(principal: Principal, role_list: Sequence[Role]) -> None:
    """Refuse (403) a role the caller could not hold: Super Admin, or more than they have."""
    if principal.is_super_admin:
        return
    for role in role_list:
        if role.is_super_admin or not role.permissions <= principal.permissions:
            raise PermissionDenied(
                f"you cannot grant the role {role.name!r}: it exceeds your own permissions"
            )


async def check_manageable(
    conn: AsyncConnection, principal: Principal, held_role_ids: Sequence[uuid.UUID]
) -> None:
    """Refuse (403) acting on a user who holds a role the caller could not grant.

    Resetting, disabling, deleting or re-roling such a user would hand the caller (or lock
    out) more access than they have.
    """
    check_grantable(principal, await load_roles(conn, held_role_ids))


async def resolve_role_ids(
    conn: AsyncConnection, principal: Principal, role_ids: Sequence[uuid.UUID]
) -> list[Role]:
    """Load a non-empty set of existing roles the caller may grant."""
    unique_ids = list(dict.fromkeys(role_ids))
    if not unique_ids:
        raise InvalidInput("role_ids: must contain at least one role")
    found = await load_roles(conn, unique_ids)
    missing = set(unique_ids) - {role.id for role in found}
    if missing:
        raise InvalidInput(f"role_ids: unknown role {sorted(map(str, missing))[0]}")
    check_grantable(principal, found)
    return found


def _parse_permissions(values: Sequence[str]) -> frozenset[Permission]:
    unknown = [v for v in values if v not in Permission._value2member_map_]
    if unknown:
        raise InvalidInput(f"permissions: unknown permission {unknown[0]!r}")
    return frozenset(Permission(v) for v in values)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise InvalidInput("name is required")
    if len(name) > MAX_ROLE_NAME:
        raise InvalidInput(f"name: must be at most {MAX_ROLE_NAME} characters")
    return name


def _check_added(principal: Principal, added: frozenset[Permission]) -> None:
    """A role editor may only add permissions they hold themselves (removing is always fine)."""
    missing = added - principal.permissions
    if missing:
        raise PermissionDenied(
            f"you cannot add the permission {sorted(missing)[0]}: you do not hold it"
        )


async def _load_one(conn: AsyncConnection, role_id: uuid.UUID) -> Role:
    found = await load_roles(conn, [role_id])
    if not found:
        raise NotFound("role not found")
    return found[0]


async def _set_permissions(
    conn: AsyncConnection, role_id: uuid.UUID, permissions: frozenset[Permission]
) -> None:
    await conn.execute(delete(role_permissions).where(role_permissions.c.role_id == role_id))
    if permissions:
        await conn.execute(
            insert(role_permissions),
            [{"role_id": role_id, "permission": str(p)} for p in sorted(permissions)],
        )


async def create_role(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    *,
    name: str,
    description: str,
    permissions: Sequence[str],
) -> Role:
    name = _check_name(name)
    granted = _parse_permissions(permissions)
    _check_added(principal, granted)
    role_id = uuid.uuid4()
    try:
        async with conn.begin_nested():
            await conn.execute(
                insert(roles).values(id=role_id, name=name, description=description.strip())
            )
    except IntegrityError:
        raise Conflict(f"a role named {name!r} already exists") from None
    await _set_permissions(conn, role_id, granted)
    role = await _load_one(conn, role_id)
    await record(conn, actor, "role.create", "role", role_id, after=role.public())
    return role


async def update_role(
    conn: AsyncConnection,
    principal: Principal,
    actor: Actor,
    role_id: uuid.UUID,
    *,
    name: str | None,
    description: str | None,
    permissions: Sequence[str] | None,
) -> Role:
    before = await _load_one(conn, role_id)
    if before.system_key is not None and name is not None and name.strip() != before.name:
        raise Conflict("system roles cannot be renamed")
    if before.is_super_admin and permissions is not None:
        raise Conflict("the Super Admin role's permissions cannot be edited")
    values: dict[str, Any] = {}
    if name is not None:
        values["name"] = _check_name(name)
    if description is not None:
        values["description"] = description.strip()
    if values:
        try:
            async with conn.begin_nested():
                await conn.execute(
                    update(roles)
                    .where(roles.c.id == role_id)
                    .values(**values, updated_at=func.now())
                )
        except IntegrityError:
            raise Conflict(f"a role named {values['name']!r} already exists") from None
    if permissions is not None:
        wanted = _parse_permissions(permissions)
        _check_added(principal, wanted - before.permissions)
        await _set_permissions(conn, role_id, wanted)
    after = await _load_one(conn, role_id)
    await record(
        conn, actor, "role.update", "role", role_id, before=before.public(), after=after.public()
    )
    return after


async def delete_role(conn: AsyncConnection, actor: Actor, role_id: uuid.UUID) -> None:
    role = await _load_one(conn, role_id)
    if role.system_key is not None:
        raise Conflict("system roles cannot be deleted")
    held = (
        await conn.execute(
            select(users.c.is_service_account, func.count())
            .select_from(user_roles.join(users, users.c.id == user_roles.c.user_id))
            .where(user_roles.c.role_id == role_id)
            .group_by(users.c.is_service_account)
        )
    ).all()
    # By is_service_account: the accounts behind MCP tokens are not users.
    holders: dict[bool, int] = {bool(kind): int(count) for kind, count in held}
    if holders.get(False):
        raise Conflict(f"the role is assigned to {holders[False]} user(s); reassign them first")
    if holders.get(True):
        raise Conflict(f"the role is bound to {holders[True]} MCP token(s); delete them first")
    tokens = (
        await conn.execute(
            select(func.count())
            .select_from(api_tokens)
            .where(api_tokens.c.role_id == role_id, api_tokens.c.revoked_at.is_(None))
        )
    ).scalar_one()
    if tokens:
        raise Conflict(f"the role is bound to {tokens} API token(s); revoke them first")
    # Revoked tokens keep their row for the record; they no longer need the role.
    await conn.execute(delete(api_tokens).where(api_tokens.c.role_id == role_id))
    await conn.execute(delete(roles).where(roles.c.id == role_id))
    await record(conn, actor, "role.delete", "role", role_id, before=role.public())
