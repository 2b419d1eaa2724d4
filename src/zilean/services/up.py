"""`zilean up`: the whole product on one machine, from one command.

It starts the embedded Postgres (unless DATABASE_URL is set), keeps the master key and
the derived script key in the data directory, seeds the Super Admin, serves core, ui,
mcp and webhook in process behind one origin, and runs the HTTP worker and the script
worker (every runtime whose interpreter exists) as child processes with their narrowed
environments.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import secrets
import shutil
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_core_app
from zilean.auth.bootstrap import super_admin_exists
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
)
from zilean.crypto.keys import derive_script_key, encode_key, generate_master_key
from zilean.db.embedded import embedded_postgres
from zilean.db.engine import create_engine
from zilean.db.migrate import migrate
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
MASTER_KEY_FILE = "settings-encryption.key"
SCRIPT_KEY_FILE = "script-secrets.key"
READY_TIMEOUT = 60.0  # seconds
PROBE_TIMEOUT = 2.0  # seconds for one readiness probe of /healthz
# What every child needs from the OS to run at all; nothing here is a secret.
PROCESS_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
# The interpreter each script runtime needs; its worker starts only when it is on PATH.
RUNTIME_INTERPRETERS: dict[ScriptRuntime, str] = {
    ScriptRuntime.BASH: "bash",
    ScriptRuntime.NODE: "node",
    ScriptRuntime.GROOVY: "groovy",
    ScriptRuntime.PYTHON: "python3",
}


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "zilean"


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT


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
    for runtime, interpreter in RUNTIME_INTERPRETERS.items():
        if shutil.which(interpreter, path=env.get("PATH")) is None:
            log.info(
                "script runtime not installed; its worker is not started",
                action="up.runtime_missing",
                runtime=str(runtime),
                interpreter=interpreter,
            )
            continue
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
    options.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = dict(environ)
    with ExitStack() as stack:
        if not env.get("DATABASE_URL"):
            env["DATABASE_URL"] = stack.enter_context(
                embedded_postgres(options.data_dir / "postgres")
            )
        ensure_keys(env, options.data_dir)
        asyncio.run(_serve(options, env))


async def _serve(options: UpOptions, env: dict[str, str]) -> None:
    # Validate everything before touching the database.
    load_settings(Service.CORE, env)
    ui = load_settings(Service.UI, env)
    mcp = load_settings(Service.MCP, narrowed(env, ("DATABASE_URL", "TZ", "MCP_ADDR")))
    webhook = load_settings(
        Service.WEBHOOK,
        narrowed(env, ("DATABASE_URL", "TZ", "WEBHOOK_ADDR", "WEBHOOK_TRUST_PROXY_HEADERS")),
    )
    assert isinstance(ui, UiSettings)
    assert isinstance(mcp, McpSettings)
    assert isinstance(webhook, WebhookSettings)

    engine = create_engine(env["DATABASE_URL"])
    supervisor = Supervisor(child_specs(env))
    try:
        await asyncio.to_thread(migrate, env["DATABASE_URL"])
        password = await _first_boot_credentials(env, engine)
        core = load_settings(Service.CORE, env)
        assert isinstance(core, CoreSettings)
        await prepare_core(core, engine)
        apps = OriginApps(
            core=create_core_app(core, engine),
            ui=create_ui_app(ui, engine),
            mcp=create_mcp_app(mcp, engine),
            webhook=create_webhook_app(webhook, engine),
        )
        server = build_server(Origin(apps), options.host, options.port)
        await supervisor.start()
        announce = asyncio.create_task(
            _announce_ready(server, options, core.admin_username, password)
        )
        try:
            await server.serve()
        finally:
            announce.cancel()
        if not server.started:
            raise SystemExit(1)
    finally:
        await supervisor.stop()
        await engine.dispose()


async def _first_boot_credentials(env: dict[str, str], engine: AsyncEngine) -> str | None:
    """On first boot with no ADMIN_PASSWORD_HASH, generate a password; return it to print once."""
    async with engine.connect() as conn:
        if await super_admin_exists(conn):
            return None
    if env.get("ADMIN_PASSWORD_HASH"):
        return None
    password = secrets.token_urlsafe(18)
    env["ADMIN_USERNAME"] = env.get("ADMIN_USERNAME") or DEFAULT_ADMIN_USERNAME
    env["ADMIN_PASSWORD_HASH"] = hash_password(password)
    return password


async def _announce_ready(
    server: Server, options: UpOptions, username: str | None, password: str | None
) -> None:
    """Print the ready line once `/healthz` answers, and first-boot credentials once."""
    base = f"http://{options.host}:{options.port}"
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
    while asyncio.get_running_loop().time() < deadline:
        if server.started and await asyncio.to_thread(_healthz_answers, options.host, options.port):
            break
        await asyncio.sleep(0.1)
    else:
        log.error("zilean did not become healthy", action="up.not_ready", url=base)
        return
    lines = [f"Zilean is ready at {base}"]
    if password is not None:
        lines += [
            f"Sign in as {username} with password: {password}",
            "This password is shown only once; change it after signing in.",
        ]
    print("\n".join(lines), flush=True)


def _healthz_answers(host: str, port: int) -> bool:
    """Return whether `/healthz` answers 200 (blocking; the supervisor runs it in a thread).

    The standard library's client: a few probes at start-up do not justify loading an
    HTTP library into the supervisor, and http.client ignores proxy variables, which must
    never divert a probe of our own address.
    """
    connection = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
