"""Outbound email: the SMTP settings (`settings:smtp`) and their test route.

The password is sealed at rest and never returned (`has_password`); a blank password on
save keeps the stored one. Relays on link-local, unspecified or multicast addresses are
refused (cloud metadata endpoints live there); private and loopback relays are fine.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import ConfigDict, Field, StrictBool

from zilean.api.access import actor_of, require
from zilean.api.responses import ErrorBody, ResponseModel
from zilean.api.routes.notify import Sent, box_of
from zilean.audit.log import record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.errors import BadGateway, Conflict, InvalidInput
from zilean.input_models import StrictInput
from zilean.notify.delivery import DeliveryFailed, refused_address, send_email
from zilean.notify.settings import SmtpSettings, load_smtp, save_smtp

router = APIRouter(prefix="/api/settings/smtp", tags=["smtp"])

Manager = Annotated[Principal, Depends(require(Permission.SETTINGS_SMTP))]
REFUSED_HOST = "host: link-local, unspecified and multicast addresses are refused"


class SmtpWrite(StrictInput):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    read_only = frozenset({"has_password"})

    host: str = Field("", max_length=255)
    port: int = Field(587, ge=1, le=65535)
    username: str = Field("", max_length=500)
    password: str = Field("", max_length=500, description="Write-only; blank keeps the stored one.")
    sender: str = Field("", alias="from", max_length=500, description="The From address.")
    enabled: StrictBool = False


class SmtpView(ResponseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    host: str
    port: int
    username: str
    sender: str = Field(alias="from")
    enabled: bool
    has_password: bool


class SmtpTest(StrictInput):
    to: str = Field(min_length=1, max_length=500, description="Where the test message goes.")
    draft: SmtpWrite | None = Field(None, description="Unsaved settings to test instead.")


def _settings(body: SmtpWrite) -> SmtpSettings:
    host = body.host.strip()
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None and refused_address(str(literal)):
        raise InvalidInput(REFUSED_HOST)
    return SmtpSettings(
        host=host,
        port=body.port,
        username=body.username.strip(),
        sender=body.sender.strip(),
        enabled=body.enabled,
        password=body.password,
    )


def _view(settings: SmtpSettings) -> SmtpView:
    return SmtpView.model_validate(settings.view())


@router.get("", operation_id="get_smtp_settings")
async def get_smtp_settings(request: Request, _: Manager) -> SmtpView:
    """The settings, without the password: `has_password` says whether one is stored."""
    async with request.app.state.engine.connect() as conn:
        return _view(await load_smtp(conn, box_of(request)))


@router.put("", operation_id="update_smtp_settings")
async def update_smtp_settings(body: SmtpWrite, request: Request, principal: Manager) -> SmtpView:
    """Save the settings, effective at once; audited as `settings.smtp`, password masked."""
    settings = _settings(body)
    if settings.enabled and not settings.host:
        raise InvalidInput("host is required when SMTP is enabled")
    box = box_of(request)
    async with request.app.state.engine.begin() as conn:
        before = await load_smtp(conn, box)
        saved = settings if settings.password else replace(settings, password=before.password)
        await save_smtp(conn, box, saved)
        await record(
            conn, actor_of(request, principal), "settings.smtp", "settings", "smtp",
            before=before.view(),
            after=saved.view() | {"password": "changed" if body.password else ""},
        )  # fmt: skip
    return _view(saved)


@router.post(
    "/test",
    operation_id="test_smtp_settings",
    responses={
        409: {"model": ErrorBody, "description": "No draft, and SMTP is not configured."},
        502: {"model": ErrorBody, "description": "The send failed; the SMTP error says why."},
    },
)
async def send_test_email(body: SmtpTest, request: Request, _: Manager) -> Sent:
    """Send a test message to `to`, through the saved settings or an unsaved `draft`."""
    async with request.app.state.engine.connect() as conn:
        saved = await load_smtp(conn, box_of(request))
    if body.draft is None:
        if not saved.configured:
            raise Conflict("SMTP is not configured")
        settings = saved
    else:
        settings = _settings(body.draft)
        if not settings.host:
            raise InvalidInput("draft.host is required")
        if not settings.password:
            same_relay = (settings.host, settings.port) == (saved.host, saved.port)
            if same_relay:
                settings = replace(settings, password=saved.password)
            elif settings.username:
                raise InvalidInput(
                    "draft.password: enter the password to test a different host or port"
                )
    try:
        await send_email(
            settings,
            body.to.strip(),
            "Zilean: test email",
            "This is a test message from Zilean: outbound email works.",
        )
    except DeliveryFailed as exc:
        raise BadGateway(str(exc)) from None
    return Sent(ok=True)
