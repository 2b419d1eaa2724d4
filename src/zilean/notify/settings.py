"""SMTP and the Apprise server connection: `app_settings` rows, secrets sealed.

The SMTP password is sealed under the master key and never leaves core; a view says only
whether one is stored (`has_password`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.crypto.secretbox import SecretBox
from zilean.db.tables import app_settings

SMTP_SETTING = "smtp"
APPRISE_SETTING = "apprise"
SMTP_PASSWORD_CONTEXT = "settings:smtp-password"  # noqa: S105 (a label, not a secret)
DEFAULT_SMTP_PORT = 587


@dataclass(frozen=True)
class SmtpSettings:
    host: str = ""
    port: int = DEFAULT_SMTP_PORT
    username: str = ""
    sender: str = ""  # the API's `from`
    enabled: bool = False
    password: str = ""  # plaintext, in memory only

    @property
    def configured(self) -> bool:
        return self.enabled and bool(self.host)

    def view(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "from": self.sender,
            "enabled": self.enabled,
            "has_password": bool(self.password),
        }


@dataclass(frozen=True)
class AppriseSettings:
    enabled: bool = False
    server_url: str = ""
    verify_tls: bool = True

    @property
    def server(self) -> str | None:
        """The server notices go through, or None: delivered in process."""
        return self.server_url if self.enabled and self.server_url else None

    def view(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "server_url": self.server_url,
            "verify_tls": self.verify_tls,
        }


async def _read(conn: AsyncConnection, key: str) -> dict[str, Any]:
    value = (
        await conn.execute(select(app_settings.c.value).where(app_settings.c.key == key))
    ).scalar_one_or_none()
    return value if isinstance(value, dict) else {}


async def _write(conn: AsyncConnection, key: str, value: dict[str, Any]) -> None:
    statement = insert(app_settings).values(key=key, value=value)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[app_settings.c.key],
            set_={"value": statement.excluded.value, "updated_at": func.now()},
        )
    )


async def load_smtp(conn: AsyncConnection, box: SecretBox) -> SmtpSettings:
    stored = await _read(conn, SMTP_SETTING)
    sealed = stored.get("password_sealed")
    password = box.open(base64.b64decode(sealed), SMTP_PASSWORD_CONTEXT) if sealed else ""
    return SmtpSettings(
        host=str(stored.get("host", "")),
        port=int(stored.get("port", DEFAULT_SMTP_PORT)),
        username=str(stored.get("username", "")),
        sender=str(stored.get("from", "")),
        enabled=bool(stored.get("enabled", False)),
        password=password,
    )


async def save_smtp(conn: AsyncConnection, box: SecretBox, settings: SmtpSettings) -> None:
    value: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "username": settings.username,
        "from": settings.sender,
        "enabled": settings.enabled,
    }
    if settings.password:
        sealed = box.seal(settings.password, SMTP_PASSWORD_CONTEXT)
        value["password_sealed"] = base64.b64encode(sealed).decode("ascii")
    await _write(conn, SMTP_SETTING, value)


def merged_password(draft: SmtpSettings, saved: SmtpSettings) -> SmtpSettings:
    """A blank password keeps the saved one (the caller checks it may)."""
    return draft if draft.password else replace(draft, password=saved.password)


async def load_apprise(conn: AsyncConnection) -> AppriseSettings:
    stored = await _read(conn, APPRISE_SETTING)
    return AppriseSettings(
        enabled=bool(stored.get("enabled", False)),
        server_url=str(stored.get("server_url", "")),
        verify_tls=bool(stored.get("verify_tls", True)),
    )


async def save_apprise(conn: AsyncConnection, settings: AppriseSettings) -> None:
    await _write(conn, APPRISE_SETTING, settings.view())
