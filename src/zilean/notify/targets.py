"""Notification targets: the registry jobs and alarms pick from.

An Apprise service URL carries credentials (`slack://TokenA/TokenB/...`): it is sealed
and only its scheme and host are ever shown (`address_hint`). A webhook's signing secret
is sealed and write-only. An email address and a webhook URL are plaintext.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.crypto.secretbox import SecretBox
from zilean.db.tables import notify_targets
from zilean.errors import InvalidInput, NotFound
from zilean.notify.delivery import apprise_url_valid
from zilean.notify.kinds import TargetKind, stored_filter

EMAIL_PATTERN = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _url_context(target_id: int) -> str:
    return f"notify-target-url:{target_id}"


def _secret_context(target_id: int) -> str:
    return f"notify-target-secret:{target_id}"


class TargetNotFound(NotFound):
    """notify target not found"""


@dataclass(frozen=True)
class TargetInput:
    name: str
    kind: TargetKind
    address: str  # empty on update of an Apprise target: keep the stored URL
    events: Sequence[str]
    signing_secret: str  # empty: keep (update) or none (create)


@dataclass(frozen=True)
class Target:
    """A target ready to deliver to: its secrets open."""

    id: int
    name: str
    kind: TargetKind
    address: str  # email address, webhook URL or (opened) Apprise URL
    events: list[str]
    signing_secret: str | None


def apprise_hint(url: str) -> str:
    """What may be shown of an Apprise URL: its scheme alone. Many services put a token
    where a host would be (`slack://TokenA/...`), so even the host is not shown."""
    scheme = urlsplit(url).scheme
    return f"{scheme}://…" if scheme else "…"


def _check(data: TargetInput, *, updating: bool) -> None:
    if not data.name.strip():
        raise InvalidInput("name is required")
    address = data.address.strip()
    if data.kind is TargetKind.EMAIL and not EMAIL_PATTERN.match(address):
        raise InvalidInput("address: must be an email address")
    if data.kind is TargetKind.WEBHOOK:
        parts = urlsplit(address)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise InvalidInput("address: must be an absolute http or https URL")
    checks_url = data.kind is TargetKind.APPRISE and (address or not updating)
    if checks_url and ("://" not in address or not apprise_url_valid(address)):
        raise InvalidInput("address: must be an Apprise service URL Apprise recognises")
    if data.signing_secret and data.kind is not TargetKind.WEBHOOK:
        raise InvalidInput("signing_secret: only webhook targets are signed")


def public(row: Any) -> dict[str, Any]:
    """A target as the API shows it: no secret, and an Apprise URL only as its hint."""
    kind = TargetKind(row["kind"])
    return {
        "id": row["id"],
        "name": row["name"],
        "kind": str(kind),
        "address": row["address_hint"] if kind is TargetKind.APPRISE else row["address"],
        "events": list(row["events"]),
        "has_signing_secret": row["sealed_signing_secret"] is not None,
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


async def list_targets(conn: AsyncConnection) -> list[dict[str, Any]]:
    rows = (await conn.execute(select(notify_targets).order_by(notify_targets.c.id))).mappings()
    return [public(row) for row in rows]


async def _row(conn: AsyncConnection, target_id: int, *, lock: bool = False) -> Any:
    statement = select(notify_targets).where(notify_targets.c.id == target_id)
    row = (
        (await conn.execute(statement.with_for_update() if lock else statement)).mappings().first()
    )
    if row is None:
        raise TargetNotFound()
    return row


async def get_target(conn: AsyncConnection, target_id: int) -> dict[str, Any]:
    return public(await _row(conn, target_id))


def _sealed_values(box: SecretBox, target_id: int, data: TargetInput) -> dict[str, Any]:
    values: dict[str, Any] = {}
    address = data.address.strip()
    if data.kind is TargetKind.APPRISE:
        if address:
            values |= {
                "sealed_url": box.seal(address, _url_context(target_id)),
                "address_hint": apprise_hint(address),
                "address": "",
            }
    else:
        values |= {"address": address, "address_hint": "", "sealed_url": None}
    if data.kind is not TargetKind.WEBHOOK:
        values["sealed_signing_secret"] = None
    elif data.signing_secret:
        values["sealed_signing_secret"] = box.seal(data.signing_secret, _secret_context(target_id))
    return values


async def create_target(conn: AsyncConnection, box: SecretBox, data: TargetInput) -> dict[str, Any]:
    _check(data, updating=False)
    target_id = (
        await conn.execute(
            insert(notify_targets)
            .values(name=data.name.strip(), kind=str(data.kind), events=stored_filter(data.events))
            .returning(notify_targets.c.id)
        )
    ).scalar_one()
    await conn.execute(
        update(notify_targets)
        .where(notify_targets.c.id == target_id)
        .values(**_sealed_values(box, target_id, data))
    )
    return await get_target(conn, target_id)


async def update_target(
    conn: AsyncConnection, box: SecretBox, target_id: int, data: TargetInput
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Replace a target; return (before, after). Changing an Apprise target's kind
    needs a new URL, and a blank secret keeps the stored one."""
    stored = await _row(conn, target_id, lock=True)
    kind_changed = stored["kind"] != str(data.kind)
    _check(data, updating=not kind_changed)
    values = {
        "name": data.name.strip(),
        "kind": str(data.kind),
        "events": stored_filter(data.events),
        "updated_at": func.now(),
        **_sealed_values(box, target_id, data),
    }
    await conn.execute(
        update(notify_targets).where(notify_targets.c.id == target_id).values(**values)
    )
    return public(stored), await get_target(conn, target_id)


async def delete_target(conn: AsyncConnection, target_id: int) -> dict[str, Any]:
    stored = await _row(conn, target_id, lock=True)
    await conn.execute(delete(notify_targets).where(notify_targets.c.id == target_id))
    return public(stored)


def _opened(box: SecretBox, row: Any) -> Target:
    kind = TargetKind(row["kind"])
    address = row["address"]
    if kind is TargetKind.APPRISE and row["sealed_url"] is not None:
        address = box.open(row["sealed_url"], _url_context(row["id"]))
    sealed_secret = row["sealed_signing_secret"]
    secret = None if sealed_secret is None else box.open(sealed_secret, _secret_context(row["id"]))
    return Target(row["id"], row["name"], kind, address, list(row["events"]), secret)


async def load_targets(
    conn: AsyncConnection, box: SecretBox, target_ids: Sequence[int] | None = None
) -> list[Target]:
    """The targets to deliver to (all of them when `target_ids` is None), secrets open."""
    statement = select(notify_targets).order_by(notify_targets.c.id)
    if target_ids is not None:
        statement = statement.where(notify_targets.c.id.in_(list(target_ids)))
    return [_opened(box, row) for row in (await conn.execute(statement)).mappings()]


async def existing_ids(conn: AsyncConnection, target_ids: Sequence[int]) -> dict[int, str]:
    """Which of these ids are targets, with their kinds."""
    rows = await conn.execute(
        select(notify_targets.c.id, notify_targets.c.kind).where(
            notify_targets.c.id.in_(list(target_ids))
        )
    )
    return {row.id: row.kind for row in rows}
