"""Global variables: named values that jobs reference as `{{name}}`.

A plain variable keeps its value as text. A secret is write-only: only AES-256-GCM
ciphertext under the master key is stored (bound to `globalvar:<id>`), and no response
or audit entry ever carries it. A secret opted into scripts (`allow_in_scripts`) also
gets a copy sealed with the derived script key (bound to `globalvar-script:<id>`): that
key is all a script worker holds, so it can open the opted-in secrets and nothing else.
The copy is dropped whenever the variable stops being a secret allowed in scripts.

An empty secret is stored as no ciphertext at all, which is what `has_value` reports.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import MASK, Actor, record
from zilean.crypto.contexts import script_context, secret_context
from zilean.crypto.keys import derive_script_key
from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.db.tables import global_variables
from zilean.errors import Conflict, InvalidInput, NotFound

MAX_NAME = 128  # characters
NAME_PATTERN = re.compile(r"[A-Za-z0-9_]+")

RESOURCE_TYPE = "global_variable"


@dataclass(frozen=True)
class Variable:
    id: uuid.UUID
    name: str
    value: str  # always "" for a secret
    secret_value: bytes | None
    script_secret_value: bytes | None
    is_secret: bool
    allow_in_scripts: bool
    created_at: datetime
    updated_at: datetime

    @property
    def has_value(self) -> bool:
        if self.is_secret:
            return self.secret_value is not None
        return self.value != ""

    def public(self) -> dict[str, Any]:
        """Return the API shape: a secret says whether it is set, never what it is."""
        return {
            "id": self.id,
            "name": self.name,
            "value": "" if self.is_secret else self.value,
            "is_secret": self.is_secret,
            "allow_in_scripts": self.allow_in_scripts,
            "has_value": self.has_value,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def snapshot(self) -> dict[str, Any]:
        """Return the audit shape: the API shape with a stored secret shown as the mask.

        The audit log masks secret-looking keys by itself, but `value` is not one of them.
        """
        shown = self.public()
        if self.is_secret and self.has_value:
            shown["value"] = MASK
        return shown


@dataclass(frozen=True)
class _Stored:
    """What goes into the value columns for one save."""

    value: str
    secret_value: bytes | None
    script_secret_value: bytes | None

    def columns(self, name: str, is_secret: bool, allow_in_scripts: bool) -> dict[str, Any]:
        return {
            "name": name,
            "value": self.value,
            "secret_value": self.secret_value,
            "script_secret_value": self.script_secret_value,
            "is_secret": is_secret,
            "allow_in_scripts": allow_in_scripts,
        }


def _from_row(row: RowMapping) -> Variable:
    return Variable(
        id=row["id"],
        name=row["name"],
        value=row["value"],
        secret_value=row["secret_value"],
        script_secret_value=row["script_secret_value"],
        is_secret=row["is_secret"],
        allow_in_scripts=row["allow_in_scripts"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _check_name(name: str) -> None:
    if not name:
        raise InvalidInput("name is required")
    if len(name) > MAX_NAME:
        raise InvalidInput(f"name: must be at most {MAX_NAME} characters")
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidInput("name: may contain only letters, digits and underscores")


def _script_copy(
    master_key: bytes, variable_id: uuid.UUID, plaintext: str, allow_in_scripts: bool
) -> bytes | None:
    if not allow_in_scripts or not plaintext:
        return None
    return SecretBox(derive_script_key(master_key)).seal(plaintext, script_context(variable_id))


def _seal(
    master_key: bytes, variable_id: uuid.UUID, plaintext: str, allow_in_scripts: bool
) -> _Stored:
    """Store `plaintext` as a secret (nothing at all when it is empty)."""
    if not plaintext:
        return _Stored("", None, None)
    return _Stored(
        "",
        SecretBox(master_key).seal(plaintext, secret_context(variable_id)),
        _script_copy(master_key, variable_id, plaintext, allow_in_scripts),
    )


def _keep(master_key: bytes, before: Variable, allow_in_scripts: bool) -> _Stored:
    """Keep a stored secret, issuing or dropping its script copy to match `allow_in_scripts`."""
    if before.secret_value is None or not allow_in_scripts:
        return _Stored("", before.secret_value, None)
    try:
        plaintext = SecretBox(master_key).open(before.secret_value, secret_context(before.id))
    except SecretUnreadable:
        raise Conflict(
            "the stored secret cannot be decrypted with the current key; enter its value again"
        ) from None
    return _Stored(
        "", before.secret_value, _script_copy(master_key, before.id, plaintext, allow_in_scripts)
    )


async def list_variables(conn: AsyncConnection) -> list[Variable]:
    """Return every variable, ordered by name."""
    rows = (
        await conn.execute(
            select(global_variables).order_by(
                func.lower(global_variables.c.name), global_variables.c.name
            )
        )
    ).mappings()
    return [_from_row(row) for row in rows]


async def _load(conn: AsyncConnection, variable_id: uuid.UUID) -> Variable:
    # FOR UPDATE: a concurrent edit waits, so each save starts from the other's result.
    row = (
        (
            await conn.execute(
                select(global_variables)
                .where(global_variables.c.id == variable_id)
                .with_for_update()
            )
        )
        .mappings()
        .one_or_none()
    )
    if row is None:
        raise NotFound("global variable not found")
    return _from_row(row)


def _duplicate(name: str) -> Conflict:
    return Conflict(f'a global variable named "{name}" already exists')


async def create_variable(
    conn: AsyncConnection,
    actor: Actor,
    master_key: bytes,
    *,
    name: str,
    value: str,
    is_secret: bool,
    allow_in_scripts: bool,
) -> Variable:
    _check_name(name)
    variable_id = uuid.uuid4()
    stored = (
        _seal(master_key, variable_id, value, allow_in_scripts)
        if is_secret
        else _Stored(value, None, None)
    )
    try:
        async with conn.begin_nested():
            row = (
                (
                    await conn.execute(
                        insert(global_variables)
                        .values(id=variable_id, **stored.columns(name, is_secret, allow_in_scripts))
                        .returning(global_variables)
                    )
                )
                .mappings()
                .one()
            )
    except IntegrityError:
        raise _duplicate(name) from None
    variable = _from_row(row)
    await record(
        conn,
        actor,
        "global_variable.create",
        RESOURCE_TYPE,
        variable.id,
        after=variable.snapshot(),
    )
    return variable


async def update_variable(
    conn: AsyncConnection,
    actor: Actor,
    master_key: bytes,
    variable_id: uuid.UUID,
    *,
    name: str,
    value: str,
    is_secret: bool,
    allow_in_scripts: bool,
) -> Variable:
    """Replace a variable. An empty `value` keeps the secret of a variable that stays secret.

    A secret turned plain with an empty `value` ends up empty: the old secret is dropped,
    never copied into the plaintext column. A plain variable turned secret takes `value` as
    the whole secret, so an empty `value` leaves it with no secret stored.
    """
    _check_name(name)
    before = await _load(conn, variable_id)
    if not is_secret:
        stored = _Stored(value, None, None)
    elif value or not before.is_secret:
        stored = _seal(master_key, variable_id, value, allow_in_scripts)
    else:
        stored = _keep(master_key, before, allow_in_scripts)
    try:
        async with conn.begin_nested():
            row = (
                (
                    await conn.execute(
                        update(global_variables)
                        .where(global_variables.c.id == variable_id)
                        .values(
                            **stored.columns(name, is_secret, allow_in_scripts),
                            updated_at=func.now(),
                        )
                        .returning(global_variables)
                    )
                )
                .mappings()
                .one()
            )
    except IntegrityError:
        raise _duplicate(name) from None
    after = _from_row(row)
    await record(
        conn,
        actor,
        "global_variable.update",
        RESOURCE_TYPE,
        variable_id,
        before=before.snapshot(),
        after=after.snapshot(),
    )
    return after


async def delete_variable(conn: AsyncConnection, actor: Actor, variable_id: uuid.UUID) -> None:
    before = await _load(conn, variable_id)
    await conn.execute(delete(global_variables).where(global_variables.c.id == variable_id))
    await record(
        conn, actor, "global_variable.delete", RESOURCE_TYPE, variable_id, before=before.snapshot()
    )
