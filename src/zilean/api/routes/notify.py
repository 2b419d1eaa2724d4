"""Notification targets, the Apprise server connection, and metrics alarms.

All under `notify_settings:*`. A target's secrets (an Apprise URL's credentials, a
webhook's signing secret) are sealed at rest and never returned; audit snapshots carry
the same public view the API shows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import aiohttp
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import Field, StrictBool

from zilean.api.access import actor_of, require
from zilean.api.responses import ErrorBody, ResponseModel
from zilean.audit.log import record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import CoreSettings
from zilean.crypto.secretbox import SecretBox
from zilean.errors import BadGateway, InvalidInput
from zilean.input_models import StrictInput
from zilean.monitoring.samples import SERVICES
from zilean.notify import targets as service
from zilean.notify import thresholds
from zilean.notify.delivery import DeliveryFailed, Notice
from zilean.notify.dispatcher import deliver
from zilean.notify.kinds import TargetKind
from zilean.notify.settings import AppriseSettings, load_apprise, load_smtp, save_apprise

router = APIRouter(tags=["notifications"])

Reader = Annotated[Principal, Depends(require(Permission.NOTIFY_SETTINGS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.NOTIFY_SETTINGS_WRITE))]
TargetId = Annotated[int, Path(ge=1, le=2_147_483_647)]
UPSTREAM_FAILED: dict[int | str, dict[str, Any]] = {
    502: {"model": ErrorBody, "description": "The target did not take the notice."}
}
PROBE_TIMEOUT = 5.0  # seconds for the Apprise server probe


def box_of(request: Request) -> SecretBox:
    settings: CoreSettings = request.app.state.settings
    return SecretBox(settings.settings_encryption_key)


class TargetWrite(StrictInput):
    read_only = frozenset({"id", "has_signing_secret", "created_at", "updated_at"})

    name: str = Field(min_length=1, max_length=200)
    kind: Literal["apprise", "email", "webhook"]
    address: str = Field(
        "",
        max_length=4000,
        description="The email address, the webhook URL, or the Apprise service URL. Blank "
        "on PUT of an Apprise target: the stored URL is kept.",
    )
    events: list[
        Literal[
            "success",
            "failure",
            "retry_exhausted",
            "invocation_alarm",
            "loop_capped",
            "firing_skipped",
        ]
    ] = Field(
        default_factory=list,
        description="Event filter; empty stores the four spec events. `failure` implies "
        "`retry_exhausted`. `loop_capped` and `firing_skipped` are opt-in.",
    )
    signing_secret: str = Field(
        "",
        max_length=1000,
        description="Webhook only, write-only: signs deliveries. Blank on PUT keeps it.",
    )


class TargetView(ResponseModel):
    id: int
    name: str
    kind: str
    address: str = Field(
        description="For an Apprise target only its scheme: the URL holds credentials."
    )
    events: list[str]
    has_signing_secret: bool
    created_at: datetime
    updated_at: datetime


class Sent(ResponseModel):
    ok: bool


def _input(body: TargetWrite) -> service.TargetInput:
    return service.TargetInput(
        name=body.name,
        kind=TargetKind(body.kind),
        address=body.address,
        events=[str(event) for event in body.events],
        signing_secret=body.signing_secret,
    )


@router.get("/api/notify/targets", operation_id="list_notify_targets")
async def list_notify_targets(request: Request, _: Reader) -> list[TargetView]:
    """Every target, oldest first; secrets are never shown."""
    async with request.app.state.engine.connect() as conn:
        return [TargetView.model_validate(t) for t in await service.list_targets(conn)]


@router.post("/api/notify/targets", status_code=201, operation_id="create_notify_target")
async def create_notify_target(
    body: TargetWrite, request: Request, principal: Writer
) -> TargetView:
    """Add a target; audited as `notify_target.create`."""
    async with request.app.state.engine.begin() as conn:
        created = await service.create_target(conn, box_of(request), _input(body))
        await record(
            conn, actor_of(request, principal), "notify_target.create", "notify_target",
            created["id"], after=created,
        )  # fmt: skip
    return TargetView.model_validate(created)


@router.put("/api/notify/targets/{target_id}", operation_id="update_notify_target")
async def update_notify_target(
    target_id: TargetId, body: TargetWrite, request: Request, principal: Writer
) -> TargetView:
    """Replace a target; a blank `signing_secret` (or Apprise `address`) keeps the stored one."""
    async with request.app.state.engine.begin() as conn:
        before, after = await service.update_target(conn, box_of(request), target_id, _input(body))
        await record(
            conn, actor_of(request, principal), "notify_target.update", "notify_target",
            target_id, before=before, after=after,
        )  # fmt: skip
    return TargetView.model_validate(after)


@router.delete(
    "/api/notify/targets/{target_id}", status_code=204, operation_id="delete_notify_target"
)
async def delete_notify_target(
    target_id: TargetId, request: Request, principal: Writer
) -> Response:
    """Delete a target; jobs that named it simply no longer reach it."""
    async with request.app.state.engine.begin() as conn:
        before = await service.delete_target(conn, target_id)
        await record(
            conn, actor_of(request, principal), "notify_target.delete", "notify_target",
            target_id, before=before,
        )  # fmt: skip
    return Response(status_code=204)


@router.post(
    "/api/notify/targets/{target_id}/test",
    operation_id="test_notify_target",
    responses=UPSTREAM_FAILED,
)
async def send_test_notice(target_id: TargetId, request: Request, _: Writer) -> Sent:
    """Send a test notice now; 502 carries why the target did not take it."""
    box = box_of(request)
    async with request.app.state.engine.connect() as conn:
        await service.get_target(conn, target_id)  # 404 first
        [target] = await service.load_targets(conn, box, [target_id])
        smtp = await load_smtp(conn, box)
        apprise = await load_apprise(conn)
    payload: dict[str, Any] = {"event": "test", "target_id": target_id}
    notice = Notice(
        "test", "Zilean: test notification", "This is a test notification from Zilean.", payload
    )
    try:
        async with aiohttp.ClientSession(headers={"User-Agent": "Zilean"}) as client:
            await deliver(client, target, notice, smtp=smtp, apprise=apprise)
    except DeliveryFailed as exc:
        raise BadGateway(str(exc)) from None
    return Sent(ok=True)


# --- the Apprise server -------------------------------------------------------------


class AppriseWrite(StrictInput):
    enabled: StrictBool = False
    server_url: str = Field("", max_length=2000, description="Must end in `/notify` when set.")
    verify_tls: StrictBool = True


class AppriseView(ResponseModel):
    enabled: bool
    server_url: str
    verify_tls: bool


class AppriseProbe(ResponseModel):
    ok: bool = Field(description="Whether the server answered with a 2xx.")
    status_code: int | None = Field(description="Its HTTP status, or null when unreachable.")
    error: str | None


def _apprise(body: AppriseWrite) -> AppriseSettings:
    url = body.server_url.strip()
    if url and not url.rstrip("/").endswith("/notify"):
        raise InvalidInput("server_url: must end in /notify")
    if url and not url.startswith(("http://", "https://")):
        raise InvalidInput("server_url: must be an absolute http or https URL")
    if body.enabled and not url:
        raise InvalidInput("server_url is required when Apprise is enabled")
    return AppriseSettings(enabled=body.enabled, server_url=url, verify_tls=body.verify_tls)


@router.get("/api/settings/apprise", operation_id="get_apprise_settings")
async def get_apprise_settings(request: Request, _: Reader) -> AppriseView:
    """The Apprise API server notices go through; off means Apprise runs in process."""
    async with request.app.state.engine.connect() as conn:
        return AppriseView.model_validate((await load_apprise(conn)).view())


@router.put("/api/settings/apprise", operation_id="update_apprise_settings")
async def update_apprise_settings(
    body: AppriseWrite, request: Request, principal: Writer
) -> AppriseView:
    """Save the connection; audited as `settings.apprise`."""
    settings = _apprise(body)
    async with request.app.state.engine.begin() as conn:
        before = await load_apprise(conn)
        await save_apprise(conn, settings)
        await record(
            conn, actor_of(request, principal), "settings.apprise", "settings", "apprise",
            before=before.view(), after=settings.view(),
        )  # fmt: skip
    return AppriseView.model_validate(settings.view())


@router.post("/api/settings/apprise/test", operation_id="test_apprise_settings")
async def probe_apprise_server(body: AppriseWrite, request: Request, _: Writer) -> AppriseProbe:
    """Probe the URL in the body (saved or not) with an empty notification."""
    settings = _apprise(body)
    if not settings.server_url:
        raise InvalidInput("server_url is required")
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as client,
            client.post(
                settings.server_url,
                json={"urls": "", "body": "Zilean connection test"},
                ssl=settings.verify_tls,
                allow_redirects=False,
            ) as response,
        ):
            status = response.status
    except Exception as exc:  # unreachable, refused, TLS: all say the same to the form
        return AppriseProbe(ok=False, status_code=None, error=type(exc).__name__)
    return AppriseProbe(ok=200 <= status < 300, status_code=status, error=None)


# --- metrics alarms -------------------------------------------------------------------

CPU_MESSAGE = "CPU threshold must be 0 or greater (for example 0.5)."
MEMORY_MESSAGE = "Memory threshold must be 0 or greater (for example 256)."


class ThresholdWrite(StrictInput):
    read_only = frozenset({"service", "last_state", "last_changed_at", "updated_at"})

    enabled: StrictBool = True
    cpu_percent: Any = Field(None, description="CPU % of one core; null for none.")
    memory_mb: Any = Field(None, description="Resident memory in MB (2^20 bytes); null for none.")
    target_ids: list[Annotated[int, Field(ge=1, le=2_147_483_647)]] = Field(
        default_factory=list, description="Apprise and email targets only."
    )


class ThresholdView(ResponseModel):
    service: str
    enabled: bool
    cpu_percent: float | None
    memory_mb: float | None
    target_ids: list[int]
    last_state: str = Field(description="`ok` or `breached`.")
    last_changed_at: datetime | None
    updated_at: datetime


def _threshold(value: Any, message: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(message)
    if value < 0 or value != value or value == float("inf"):
        raise InvalidInput(message)
    return float(value)


@router.get("/api/notify/thresholds", operation_id="list_notify_thresholds")
async def list_notify_thresholds(request: Request, _: Reader) -> list[ThresholdView]:
    """Every service's metrics alarm with its current state (`ok` or `breached`)."""
    async with request.app.state.engine.connect() as conn:
        return [ThresholdView.model_validate(row) for row in await thresholds.list_all(conn)]


@router.put("/api/notify/thresholds/{service_name}", operation_id="update_notify_threshold")
async def update_notify_threshold(
    service_name: str, body: ThresholdWrite, request: Request, principal: Writer
) -> ThresholdView:
    """Set one service's CPU and/or memory alarm; audited as `notify_threshold.update`."""
    if service_name not in {str(s) for s in SERVICES}:
        raise InvalidInput("service: must be one of " + ", ".join(str(s) for s in SERVICES))
    cpu = _threshold(body.cpu_percent, CPU_MESSAGE)
    memory = _threshold(body.memory_mb, MEMORY_MESSAGE)
    if cpu is None and memory is None:
        raise InvalidInput("Set a CPU or memory threshold.")
    async with request.app.state.engine.begin() as conn:
        kinds = await service.existing_ids(conn, body.target_ids)
        for target_id in body.target_ids:
            if target_id not in kinds:
                raise InvalidInput(f"target_ids: no target {target_id}")
            if kinds[target_id] == TargetKind.WEBHOOK:
                raise InvalidInput(
                    "target_ids: metrics alarms notify Apprise and email targets only"
                )
        before, after = await thresholds.save(
            conn, service_name, enabled=body.enabled, cpu_percent=cpu, memory_mb=memory,
            target_ids=sorted(set(body.target_ids)),
        )  # fmt: skip
        await record(
            conn, actor_of(request, principal), "notify_threshold.update", "notify_threshold",
            service_name, before=before, after=after,
        )  # fmt: skip
    return ThresholdView.model_validate(after)
