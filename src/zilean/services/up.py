"""`zilean up`: the whole product on one machine, from one command.

It binds its address first (so a taken port fails before anything is created), starts
the embedded Postgres (unless DATABASE_URL is set), keeps the master key and the derived
script key in the data directory, serves core, ui, mcp and webhook in process behind one
origin, and runs the HTTP worker and the script worker (every runtime whose interpreter
exists) as child processes with their narrowed environments.

A first boot without ADMIN_PASSWORD_HASH generates the Super Admin's password but creates
the account only once the origin answers, and prints the password in the same step: a
start that fails earlier leaves no account nobody can sign in to. Logs go in full to
`<data-dir>/zilean.log`; the terminal shows warnings and the ready banner.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import os
import secrets
import socket
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_core_app
from zilean.auth.bootstrap import seed_super_admin, super_admin_exists
from zilean.auth.passwords import hash_password
from zilean.config import (
    SCRIPT_WORKER_ENVIRONMENT,
    WORKER_ENVIRONMENT,
    CoreSettings,
    McpSettings,
    ScriptRuntime,
    Service,
    UiSettings,
    WebhookSettings,
    decode_key,
    load_settings,
    script_worker_service,
)
from zilean.crypto.keys import derive_script_key, encode_key, generate_master_key
from zilean.db.embedded import embedded_postgres
from zilean.db.engine import create_engine
from zilean.db.migrate import migrate
from zilean.errors import ConfigError
from zilean.jobkinds.script.runtimes import report_unavailable
from zilean.logs import LOG_FILE_VARIABLE, LOG_LEVEL_VARIABLE, configure_logging
from zilean.mcp.app import create_mcp_app
from zilean.services.core import prepare_core
from zilean.services.http import Server, build_server
from zilean.services.origin import Origin, OriginApps
from zilean.services.supervisor import ChildSpec, Supervisor
from zilean.ui.app import create_ui_app
from zilean.webhooks.app import create_webhook_app

log = structlog.get_logger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
DEFAULT_ADMIN_USERNAME = "admin@localhost"
DEFAULT_LOG_LEVEL = "warning"  # what reaches the terminal; the log file gets everything
MASTER_KEY_FILE = "settings-encryption.key"
SCRIPT_KEY_FILE = "script-secrets.key"
LOG_FILE = "zilean.log"
READY_TIMEOUT = 60.0  # seconds
PROBE_TIMEOUT = 2.0  # seconds for one readiness probe of /healthz
# What every child needs from the OS to run at all, and where it logs; none is a secret.
PROCESS_ENVIRONMENT = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "VIRTUAL_ENV",
    LOG_FILE_VARIABLE,
    LOG_LEVEL_VARIABLE,
)
# Addresses that mean "every interface", and the loopback address that reaches them.
_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "zilean"


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    log_level: str = DEFAULT_LOG_LEVEL

    @property
    def log_file(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def base_url(self) -> str:
        """The origin as this machine reaches it (loopback when bound to every interface)."""
        host = _WILDCARDS.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"


@dataclass(frozen=True)
class GeneratedAdmin:
    """First-boot credentials, created in the database only once `zilean up` is serving."""

    username: str
    password: str = field(repr=False)
    password_hash: str = field(repr=False)


def bind_listener(host: str, port: int) -> socket.socket:
    """Bind and listen on the origin's address, or explain how to choose another.

    This runs before anything else, and Uvicorn later serves on this very socket, so
    nothing can take the port in between: a start that gets past here never fails on it.
    """
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(
            f"cannot listen on {shown}: {exc.strerror}; choose another address with --host"
        ) from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen()
    except OSError as exc:
        listener.close()
        raise ConfigError(_bind_failure(shown, port, exc)) from None
    return listener


def _bind_failure(shown: str, port: int, exc: OSError) -> str:
    other = port + 1 if port < 65535 else 8095
    choose = (
        f"choose another port with --port, e.g. `zilean up --port {other}` "
        f'(`make run ARGS="--port {other}"`)'
    )
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is already in use ({shown}): stop what is using it, or {choose}"
    if exc.errno == errno.EACCES:
        return f"no permission to listen on port {port} ({shown}): {choose}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {shown}: this machine has no such address; see --host"
    return f"cannot listen on {shown}: {exc.strerror}; {choose}"


def start_logging(options: UpOptions) -> None:
    """Send full logs to the data directory (the previous run's kept as `.1`) and only
    `options.log_level` and above to the terminal, for this process and its children."""
    if options.log_file.exists():
        options.log_file.replace(options.log_file.with_name(LOG_FILE + ".1"))
    configure_logging("up", level=options.log_level, log_file=options.log_file)


def _read_or_create_secret(path: Path, create: str) -> str:
    """Return the secret stored at `path`, writing `create` there first (mode 0600) if absent."""
    if path.exists():
        return path.read_text().strip()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(create + "\n")
    log.info("generated a key", action="up.key_generated", path=str(path))
    return create


def ensure_keys(env: dict[str, str], data_dir: Path) -> None:
    """Fill SETTINGS_ENCRYPTION_KEY and SCRIPT_SECRETS_KEY from the data dir when unset."""
    if not env.get("SETTINGS_ENCRYPTION_KEY"):
        env["SETTINGS_ENCRYPTION_KEY"] = _read_or_create_secret(
            data_dir / MASTER_KEY_FILE, generate_master_key()
        )
    if not env.get("SCRIPT_SECRETS_KEY"):
        master = decode_key("SETTINGS_ENCRYPTION_KEY", env["SETTINGS_ENCRYPTION_KEY"])
        derived = encode_key(derive_script_key(master))
        stored = _read_or_create_secret(data_dir / SCRIPT_KEY_FILE, derived)
        if stored != derived:
            # The master key changed since the file was written: the derivation wins.
            (data_dir / SCRIPT_KEY_FILE).write_text(derived + "\n")
        env["SCRIPT_SECRETS_KEY"] = derived


def narrowed(env: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    keep = (*PROCESS_ENVIRONMENT, *names)
    return {name: env[name] for name in keep if name in env}


def child_specs(env: Mapping[str, str]) -> list[ChildSpec]:
    """The worker processes to run: the HTTP worker, and one process for the script runtimes.

    Every runtime whose interpreter is installed runs in that one script worker process
    (one queue, engine and sample label each): they share a trust tier, and a process
    per runtime would cost ~70 MiB each. A deployment still runs one per runtime.
    """
    specs = [
        ChildSpec(
            label=str(Service.WORKER),
            argv=[sys.executable, "-m", "zilean", "worker"],
            env=narrowed(env, WORKER_ENVIRONMENT),
        )
    ]
    runtimes: list[str] = []
    for runtime in ScriptRuntime:
        # A runtime runs when one of its job types can (node without tsx still runs
        # JavaScript); the terminal says which job types are left out and why.
        if report_unavailable(runtime, env, none_left="script worker not started"):
            runtimes += ["--runtime", str(runtime)]
    if runtimes:
        specs.append(
            ChildSpec(
                label="script-worker",
                argv=[sys.executable, "-m", "zilean", "script-worker", *runtimes],
                env=narrowed(env, SCRIPT_WORKER_ENVIRONMENT),
            )
        )
    return specs


def run_up(options: UpOptions, environ: Mapping[str, str]) -> None:
    """Run everything until Ctrl-C or SIGTERM; stop every child and the embedded Postgres."""
    listener = bind_listener(options.host, options.port)
    with listener, ExitStack() as stack:
        options.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        start_logging(options)
        print(f"Starting Zilean at {options.base_url} (full logs: {options.log_file})", flush=True)
        env = dict(environ)
        env[LOG_FILE_VARIABLE] = str(options.log_file)
        env[LOG_LEVEL_VARIABLE] = options.log_level
        if not env.get("DATABASE_URL"):
            env["DATABASE_URL"] = stack.enter_context(
                embedded_postgres(options.data_dir / "postgres")
            )
        ensure_keys(env, options.data_dir)
        if not env.get("MCP_HEALTH_URL", "").strip():
            # The mcp app is served in this process, behind this origin: its answer is ours.
            env["MCP_HEALTH_URL"] = f"{options.base_url}/healthz"
        asyncio.run(_serve(options, env, listener))


async def _serve(options: UpOptions, env: dict[str, str], listener: socket.socket) -> None:
    # Validate everything before touching the database.
    core = load_settings(Service.CORE, env)
    ui = load_settings(Service.UI, env)
    mcp = load_settings(Service.MCP, narrowed(env, ("DATABASE_URL", "TZ", "MCP_ADDR")))
    webhook = load_settings(
        Service.WEBHOOK,
        narrowed(env, ("DATABASE_URL", "TZ", "WEBHOOK_ADDR", "WEBHOOK_TRUST_PROXY_HEADERS")),
    )
    # The script worker's own values (SCRIPT_SANDBOX_ENABLED, ...) are the same for every
    # runtime: refuse a bad one here, not in a child that would exit after the banner.
    any_runtime = next(iter(ScriptRuntime))
    load_settings(
        script_worker_service(any_runtime),
        narrowed(env, SCRIPT_WORKER_ENVIRONMENT),
        runtime=any_runtime,
    )
    assert isinstance(core, CoreSettings)
    assert isinstance(ui, UiSettings)
    assert isinstance(mcp, McpSettings)
    assert isinstance(webhook, WebhookSettings)

    engine = create_engine(env["DATABASE_URL"])
    supervisor = Supervisor(child_specs(env))
    try:
        await asyncio.to_thread(migrate, env["DATABASE_URL"])
        admin = await _first_boot_admin(core, engine)
        await prepare_core(
            core,
            engine,
            seed_admin=admin is None,
            sample_job_local_url=f"{options.base_url}/healthz",
        )
        apps = OriginApps(
            core=create_core_app(core, engine),
            ui=create_ui_app(ui, engine),
            mcp=create_mcp_app(mcp, engine),
            webhook=create_webhook_app(webhook, engine),
        )
        server = build_server(Origin(apps), options.host, options.port)
        await supervisor.start()
        announce = asyncio.create_task(_announce_ready(server, options, engine, admin))
        try:
            await server.serve(sockets=[listener])
        finally:
            announce.cancel()
        if not server.started:
            raise SystemExit(1)
        if announce.done() and not announce.cancelled() and announce.exception() is not None:
            raise SystemExit(1)
    finally:
        await supervisor.stop()
        await engine.dispose()


async def _first_boot_admin(core: CoreSettings, engine: AsyncEngine) -> GeneratedAdmin | None:
    """On first boot with no ADMIN_PASSWORD_HASH, generate the Super Admin's password."""
    if core.admin_password_hash:
        return None
    async with engine.connect() as conn:
        if await super_admin_exists(conn):
            return None
    password = secrets.token_urlsafe(18)
    return GeneratedAdmin(
        username=core.admin_username or DEFAULT_ADMIN_USERNAME,
        password=password,
        password_hash=await asyncio.to_thread(hash_password, password),
    )


async def _create_admin(engine: AsyncEngine, admin: GeneratedAdmin) -> bool:
    """Create the generated Super Admin; False if another core created one first."""
    async with engine.begin() as conn:
        return await seed_super_admin(conn, admin.username, admin.password_hash)


async def _announce_ready(
    server: Server, options: UpOptions, engine: AsyncEngine, admin: GeneratedAdmin | None
) -> None:
    """Once `/healthz` answers, create the generated admin, then print the ready banner.

    Creating the account and printing its password happen back to back, so a password is
    never stored that was not shown. A failure to create it stops `zilean up`.
    """
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
    while asyncio.get_running_loop().time() < deadline:
        if server.started and await asyncio.to_thread(_healthz_answers, options.base_url):
            break
        await asyncio.sleep(0.1)
    else:
        log.error(
            "zilean did not become healthy; no Super Admin was created",
            action="up.not_ready",
            url=options.base_url,
        )
        return
    created = None
    if admin is not None:
        try:
            if await _create_admin(engine, admin):
                created = admin
            else:
                log.warning(
                    "another process created the Super Admin first; use its credentials",
                    action="up.admin_exists",
                )
        except Exception:
            log.exception("could not create the Super Admin; stopping", action="up.admin_failed")
            server.should_exit = True
            raise
    print(ready_banner(options, created), flush=True)


def ready_banner(options: UpOptions, admin: GeneratedAdmin | None) -> str:
    """The lines a person looks for among the logs: where to go and how to sign in."""
    rule = "-" * 72
    lines = ["", rule, f"  Zilean is ready at {options.base_url}"]
    if admin is not None:
        lines += [
            f"  Sign in as {admin.username} with password: {admin.password}",
            "  This password is shown only once; change it after signing in.",
            "  Lost it? `zilean reset-admin-password` sets a new one.",
        ]
    lines.append(f"  Full logs: {options.log_file}")
    if options.log_level in ("warning", "error"):
        lines.append("  (`--log-level info` shows them here too)")
    lines += [rule, ""]
    return "\n".join(lines)


def _healthz_answers(base_url: str) -> bool:
    """Return whether `/healthz` answers 200 (blocking; the supervisor runs it in a thread).

    The standard library's client: a few probes at start-up do not justify loading an
    HTTP library into the supervisor, and http.client ignores proxy variables, which must
    never divert a probe of our own address.
    """
    connection = http.client.HTTPConnection(base_url.removeprefix("http://"), timeout=PROBE_TIMEOUT)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
