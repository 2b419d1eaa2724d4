"""Every environment variable Zilean reads, parsed and validated in one place.

Each service builds its settings once at start-up with `load_settings(service, environ)`.
A bad value raises `ConfigError` naming the variable and the value; the CLI turns that
into a non-zero exit. Nothing here reads `os.environ` at import time.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TypedDict
from urllib.parse import urlsplit

import structlog

from zilean.errors import ConfigError
from zilean.jobkinds.definitions import ScriptRuntime as ScriptRuntime  # read from here too

log = structlog.get_logger(__name__)

KEY_BYTES = 32
DEFAULT_AUDIT_RETENTION_DAYS = 180
DEFAULT_WORKER_MAX_CONCURRENCY = 20
MAX_WORKER_CONCURRENCY = 200
LOCALTIME = Path("/etc/localtime")  # the zone file the C library reads when TZ is unset
TIMEZONE_FILE = Path("/etc/timezone")  # Debian's name for that zone; may be stale
FALLBACK_ZONE = "UTC"
# Entries of a zoneinfo tree that are not zones to report (`localtime` points back here).
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
SCRIPT_WORKER_CONCURRENCY = 5


class Service(StrEnum):
    """A service label: the process kind, as it appears in logs and metrics."""

    CORE = "core"
    UI = "ui"
    WORKER = "worker"
    MCP = "mcp"
    WEBHOOK = "webhook"
    # One label per script runtime (SCRIPT_WORKER_BASH = "script-worker-bash", ...), made
    # from the runtime table so that adding a runtime does not touch this module. In an
    # enum's body, vars() is the namespace that becomes its members.
    vars().update({f"SCRIPT_WORKER_{r.name}": r.service_name for r in ScriptRuntime})

    @property
    def is_script_worker(self) -> bool:
        return self.value.startswith("script-worker-")


def script_worker_service(runtime: ScriptRuntime) -> Service:
    """The service label of `runtime`'s script worker."""
    return Service(runtime.service_name)


@dataclass(frozen=True)
class ListenAddress:
    """A `host:port` listen address; an empty host means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class CommonSettings:
    database_url: str
    timezone: str


@dataclass(frozen=True)
class CoreSettings(CommonSettings):
    listen: ListenAddress
    settings_encryption_key: bytes = field(repr=False)
    admin_username: str | None
    admin_password_hash: str | None = field(repr=False)
    public_base_url: str
    seed_job: bool
    demo_mode: bool
    demo_display_password: str | None = field(repr=False)
    demo_echo_base_url: str
    default_audit_retention_days: int
    mcp_health_url: str


@dataclass(frozen=True)
class UiSettings(CommonSettings):
    listen: ListenAddress
    trust_proxy_headers: bool
    login_rate_per_minute: int
    login_rate_burst: int
    demo_mode: bool
    demo_display_password: str | None = field(repr=False)


@dataclass(frozen=True)
class WorkerSettings(CommonSettings):
    settings_encryption_key: bytes = field(repr=False)
    max_concurrency: int
    # Where a run that finally fails is reported when its job sets no on_failure_url.
    on_failure_url: str | None = None


@dataclass(frozen=True)
class ScriptWorkerSettings(CommonSettings):
    runtime: ScriptRuntime
    script_secrets_key: bytes = field(repr=False)
    volumes_root: Path | None
    sandbox_enabled: bool
    max_concurrency: int = SCRIPT_WORKER_CONCURRENCY
    # Where a run that finally fails is reported when its job sets no on_failure_url.
    on_failure_url: str | None = None


@dataclass(frozen=True)
class McpSettings(CommonSettings):
    listen: ListenAddress


@dataclass(frozen=True)
class WebhookSettings(CommonSettings):
    listen: ListenAddress
    trust_proxy_headers: bool
    # The in-process per-client limiter (defence in depth; the reverse proxy's limit is the
    # primary control). Generous: one sender legitimately fires many jobs. Not read from
    # the environment.
    rate_per_minute: int = 600
    rate_burst: int = 120


Settings = (
    CoreSettings
    | UiSettings
    | WorkerSettings
    | ScriptWorkerSettings
    | McpSettings
    | WebhookSettings
)

DEFAULT_ADDRESSES: dict[Service, tuple[str, str]] = {
    Service.CORE: ("CORE_ADDR", ":8091"),
    Service.UI: ("UI_ADDR", ":8090"),
    Service.MCP: ("MCP_ADDR", ":8092"),
    Service.WEBHOOK: ("WEBHOOK_ADDR", ":8093"),
}

# The variables each tier may see. `zilean up` hands child processes only these,
# so a script worker never holds the master key or admin credentials.
WORKER_ENVIRONMENT = (
    "DATABASE_URL",
    "TZ",
    "SETTINGS_ENCRYPTION_KEY",
    "WORKER_MAX_CONCURRENCY",
    "ZILEAN_ON_FAILURE_URL",
)
SCRIPT_WORKER_ENVIRONMENT = (
    "DATABASE_URL",
    "TZ",
    "SCRIPT_SECRETS_KEY",
    "SCRIPT_VOLUMES_ROOT",
    "SCRIPT_SANDBOX_ENABLED",
    "ZILEAN_ON_FAILURE_URL",
)
ZERO_KEY_VARIABLES = ("SETTINGS_ENCRYPTION_KEY", "SCRIPT_SECRETS_KEY")


class _Env:
    """Typed reads of one environment mapping; empty values count as unset."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value

    def string(self, name: str, default: str) -> str:
        value = self.raw(name)
        return default if value is None else value.strip()

    def required(self, name: str, message: str | None = None) -> str:
        value = self.raw(name)
        if value is None:
            raise ConfigError(message or f"{name} is required")
        return value.strip()

    def flag(self, name: str) -> bool:
        """Read a switch that is on only when set to exactly "1"."""
        return self._environ.get(name) == "1"

    def switch(self, name: str) -> bool:
        """Read a switch that must be "1" (on), "0" (off) or unset; refuse anything else.

        For a switch whose silent misreading matters: `true` or a quoted "1" from an
        env_file would otherwise mean off without a word.
        """
        value = self.raw(name)
        if value is None or value.strip() == "0":
            return False
        if value.strip() == "1":
            return True
        raise ConfigError(f"{name} must be 1 (on), 0 or empty (off) (got {value!r})")

    def boolean(self, name: str) -> bool:
        value = self.raw(name)
        if value is None:
            return False
        lowered = value.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{name} must be true or false (got {value!r})")

    def positive_int(self, name: str, default: int) -> int:
        value = self.raw(name)
        if value is None:
            return default
        number = _parse_int(value)
        if number is None or number < 1:
            raise ConfigError(f"{name} must be a positive integer (got {value!r})")
        return number

    def key(self, name: str, *, required: bool) -> bytes | None:
        value = self.raw(name)
        if value is None:
            if required:
                raise ConfigError(
                    f"{name} is required: a {KEY_BYTES}-byte key, base64-encoded "
                    "(generate one with `zilean gen-key`)"
                )
            return None
        return decode_key(name, value)

    def listen_address(self, service: Service) -> ListenAddress:
        name, default = DEFAULT_ADDRESSES[service]
        value = self.string(name, default)
        return parse_listen_address(name, value)


def _parse_int(value: str) -> int | None:
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        return None
    return int(text)


def decode_key(name: str, value: str) -> bytes:
    """Decode a base64 key and insist on exactly 32 bytes."""
    try:
        key = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(
            f"{name} must be {KEY_BYTES} bytes encoded as base64 (got a value that is not base64)"
        ) from None
    if len(key) != KEY_BYTES:
        raise ConfigError(
            f"{name} must be {KEY_BYTES} bytes encoded as base64 (got {len(key)} bytes)"
        )
    return key


def parse_listen_address(name: str, value: str) -> ListenAddress:
    """Parse `:8091`, `127.0.0.1:8091` or `[::1]:8091`."""
    host, sep, port_text = value.rpartition(":")
    port = _parse_int(port_text) if sep else None
    if port is None or not 0 < port < 65536:
        raise ConfigError(f"{name} must look like HOST:PORT or :PORT (got {value!r})")
    return ListenAddress(host.strip("[]"), port)


def _database_url(env: _Env) -> str:
    url = env.required("DATABASE_URL")
    scheme = urlsplit(url).scheme
    if scheme not in {"postgres", "postgresql", "postgresql+psycopg"}:
        raise ConfigError(
            f"DATABASE_URL must be a postgres:// or postgresql:// URL (got scheme {scheme!r})"
        )
    return url


def _is_zone(key: str) -> bool:
    try:
        zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _linked_zone(localtime: Path) -> str | None:
    """Return the zone a symlinked `/etc/localtime` names (`.../zoneinfo/<key>`), if valid."""
    try:
        first_hop = localtime.parent / localtime.readlink()  # an absolute link replaces it
        last_hop = localtime.resolve()
    except (OSError, RuntimeError):  # missing, a plain file, or a symlink loop
        return None
    # The first hop keeps the name the admin chose (US/Eastern); the last is canonical.
    # normpath, not resolve: resolving would follow the alias's own link.
    for target in (Path(os.path.normpath(first_hop)), last_hop):
        parts = target.parts
        if "zoneinfo" not in parts:
            continue
        after = parts[len(parts) - parts[::-1].index("zoneinfo") :]
        key = "/".join(after).removeprefix("posix/")
        if key and key not in _NOT_ZONES and _is_zone(key):
            return key
    return None


def _zone_bytes(key: str) -> bytes | None:
    """Return the TZif file `zoneinfo` would load for `key`: TZPATH first, then `tzdata`."""
    for directory in zoneinfo.TZPATH:
        try:
            return (Path(directory) / key).read_bytes()
        except OSError:
            continue
    try:
        return resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).read_bytes()
    except (ImportError, OSError):
        return None


def _copied_zone(data: bytes, hint: str | None) -> str | None:
    """Return a zone whose file is byte-identical to `data`, preferring a recognisable name.

    Aliases share one file, so several keys match: the `/etc/timezone` hint wins, then
    `UTC`, then an Area/Location key over a legacy one (`Europe/Paris` over `MET`).
    """
    keys = zoneinfo.available_timezones() - _NOT_ZONES
    matches = {key for key in keys if _zone_bytes(key) == data}
    if hint in matches:
        return hint
    if "UTC" in matches:
        return "UTC"
    ranked = sorted(matches, key=lambda key: ("/" not in key or key.startswith("Etc/"), key))
    return ranked[0] if ranked else None


def machine_zone(localtime: Path = LOCALTIME, timezone_file: Path = TIMEZONE_FILE) -> str:
    """Return the IANA key of the machine's zone, as the C library resolves it, else UTC.

    `/etc/localtime` decides, as it does for libc. A symlink into a zoneinfo tree names
    the zone. A plain copy (a host's file bind-mounted into a container, say) is matched by
    content against the zones Python knows, `/etc/timezone` naming the preferred alias; a
    copy from a different tzdata release may match none, and then TZ must name the zone.
    No `/etc/localtime` at all means UTC, which is what libc uses then.
    """
    linked = _linked_zone(localtime)
    if linked is not None:
        return linked
    try:
        data = localtime.read_bytes()
    except OSError:
        return FALLBACK_ZONE
    try:
        hint: str | None = timezone_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        hint = None
    copied = _copied_zone(data, hint)
    if copied is None:
        log.warning(
            "cannot tell which zone /etc/localtime holds; using UTC. Set TZ to name it",
            action="config.unknown_machine_zone",
            localtime=str(localtime),
        )
        return FALLBACK_ZONE
    return copied


def _timezone(env: _Env) -> str:
    """Return `TZ` as an IANA key; unset or empty means the machine's zone."""
    name = env.string("TZ", "")
    if not name:
        return machine_zone()
    # A leading colon is the POSIX way of naming a zone file; zoneinfo wants the bare key.
    key = name.removeprefix(":")
    if not _is_zone(key):
        raise ConfigError(f"TZ must be an IANA time zone such as Europe/Paris (got {name!r})")
    return key


def _admin_username(env: _Env) -> str | None:
    value = env.raw("ADMIN_USERNAME")
    if value is None:
        return None
    if "@" not in value:
        raise ConfigError(
            f'ADMIN_USERNAME must be an email address (got "{value}") '
            "— update it in .env before starting zilean-core"
        )
    return value.strip()


_BCRYPT_HASH = re.compile(r"^\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}$")


def _admin_password_hash(env: _Env) -> str | None:
    value = env.raw("ADMIN_PASSWORD_HASH")
    if value is None:
        return None
    value = value.strip()
    if not _BCRYPT_HASH.match(value):
        # Never echo the value: a mistyped hash may be a pasted password.
        raise ConfigError(
            "ADMIN_PASSWORD_HASH must be a bcrypt hash such as $2b$10$... "
            "(generate one with `zilean hash-password`)"
        )
    return value


def _public_base_url(env: _Env) -> str:
    value = env.string("PUBLIC_BASE_URL", "")
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc or value.endswith("/"):
        raise ConfigError(
            "PUBLIC_BASE_URL must be a scheme and host with no trailing slash, "
            f"such as https://zilean.example.com (got {value!r})"
        )
    return value


def _on_failure_url(env: _Env) -> str | None:
    value = env.raw("ZILEAN_ON_FAILURE_URL")
    if value is None:
        return None
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(
            "ZILEAN_ON_FAILURE_URL must be an absolute http or https URL, "
            f"such as https://hooks.example.com/zilean-failed (got {value!r})"
        )
    return value


def _audit_retention_days(env: _Env) -> int:
    value = env.raw("DEFAULT_AUDIT_RETENTION_DAYS")
    if value is None:
        return DEFAULT_AUDIT_RETENTION_DAYS
    days = _parse_int(value)
    if days is None or days < 1:
        log.warning(
            "invalid DEFAULT_AUDIT_RETENTION_DAYS, using the default",
            action="config.fallback",
            variable="DEFAULT_AUDIT_RETENTION_DAYS",
            value=value,
            default=DEFAULT_AUDIT_RETENTION_DAYS,
        )
        return DEFAULT_AUDIT_RETENTION_DAYS
    return days


def _worker_concurrency(env: _Env) -> int:
    value = env.raw("WORKER_MAX_CONCURRENCY")
    if value is None:
        return DEFAULT_WORKER_MAX_CONCURRENCY
    number = _parse_int(value)
    if number is None or not 1 <= number <= MAX_WORKER_CONCURRENCY:
        raise ConfigError(
            f"WORKER_MAX_CONCURRENCY must be an integer from 1 to {MAX_WORKER_CONCURRENCY} "
            f"(got {value!r})"
        )
    return number


def _volumes_root(env: _Env) -> Path | None:
    value = env.raw("SCRIPT_VOLUMES_ROOT")
    if value is None:
        return None
    path = Path(value.strip())
    if not path.is_absolute():
        raise ConfigError(f"SCRIPT_VOLUMES_ROOT must be an absolute path (got {value!r})")
    if path.resolve() == Path("/"):
        raise ConfigError(f"SCRIPT_VOLUMES_ROOT cannot be / (got {value!r})")
    return path


def _refuse_keys(env: _Env, service: Service) -> None:
    for name in ZERO_KEY_VARIABLES:
        if env.raw(name) is not None:
            raise ConfigError(
                f"{name} is set, but zilean {service} must not hold encryption keys; "
                f"remove {name} from its environment"
            )


class _Common(TypedDict):
    database_url: str
    timezone: str


def _common(env: _Env) -> _Common:
    return {"database_url": _database_url(env), "timezone": _timezone(env)}


def load_settings(
    service: Service, environ: Mapping[str, str], *, runtime: ScriptRuntime | None = None
) -> Settings:
    """Build the settings of one service from an environment mapping.

    Raise `ConfigError` on the first invalid value. Zero-key checks run before
    anything else, so a stray full `.env` fails loudly even when it is also incomplete.
    """
    env = _Env(environ)
    if service in {Service.MCP, Service.WEBHOOK}:
        _refuse_keys(env, service)
    match service:
        case Service.CORE:
            admin_username = _admin_username(env)
            return CoreSettings(
                **_common(env),
                listen=env.listen_address(service),
                settings_encryption_key=_required_key(env, "SETTINGS_ENCRYPTION_KEY"),
                admin_username=admin_username,
                admin_password_hash=_admin_password_hash(env),
                public_base_url=_public_base_url(env),
                seed_job=env.flag("SEED_JOB"),
                demo_mode=env.flag("DEMO_MODE"),
                demo_display_password=env.raw("DEMO_DISPLAY_PASSWORD"),
                demo_echo_base_url=env.string("DEMO_ECHO_BASE_URL", "http://127.0.0.1:8099"),
                default_audit_retention_days=_audit_retention_days(env),
                mcp_health_url=env.string("MCP_HEALTH_URL", "http://zilean-mcp:8092/healthz"),
            )
        case Service.UI:
            return UiSettings(
                **_common(env),
                listen=env.listen_address(service),
                trust_proxy_headers=env.boolean("UI_TRUST_PROXY_HEADERS"),
                login_rate_per_minute=env.positive_int("UI_LOGIN_RATE_PER_MINUTE", 10),
                login_rate_burst=env.positive_int("UI_LOGIN_RATE_BURST", 5),
                demo_mode=env.flag("DEMO_MODE"),
                demo_display_password=env.raw("DEMO_DISPLAY_PASSWORD"),
            )
        case Service.WORKER:
            return WorkerSettings(
                **_common(env),
                settings_encryption_key=_required_key(env, "SETTINGS_ENCRYPTION_KEY"),
                max_concurrency=_worker_concurrency(env),
                on_failure_url=_on_failure_url(env),
            )
        case Service.MCP:
            return McpSettings(**_common(env), listen=env.listen_address(service))
        case Service.WEBHOOK:
            return WebhookSettings(
                **_common(env),
                listen=env.listen_address(service),
                trust_proxy_headers=env.boolean("WEBHOOK_TRUST_PROXY_HEADERS"),
            )
        case _:
            if runtime is None or script_worker_service(runtime) is not service:
                raise ValueError(f"{service} needs its matching script runtime")
            if env.raw("SETTINGS_ENCRYPTION_KEY") is not None:
                log.warning(
                    "SETTINGS_ENCRYPTION_KEY is set but script workers never use it; "
                    "remove it from their environment",
                    action="config.extra_key",
                    service=str(service),
                )
            return ScriptWorkerSettings(
                **_common(env),
                on_failure_url=_on_failure_url(env),
                runtime=runtime,
                script_secrets_key=_required_key(env, "SCRIPT_SECRETS_KEY"),
                volumes_root=_volumes_root(env),
                sandbox_enabled=env.switch("SCRIPT_SANDBOX_ENABLED"),
            )


def _required_key(env: _Env, name: str) -> bytes:
    key = env.key(name, required=True)
    assert key is not None
    return key
