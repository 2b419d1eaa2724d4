"""The `zilean` command: one subcommand per service, plus key and password helpers."""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from zilean.config import (
    CoreSettings,
    ScriptRuntime,
    ScriptWorkerSettings,
    Service,
    WorkerSettings,
    decode_key,
    load_settings,
)
from zilean.crypto.keys import derive_script_key, encode_key, generate_master_key
from zilean.errors import ZileanError
from zilean.logs import configure_logging

app = typer.Typer(
    name="zilean",
    help="Zilean: a self-hosted scheduled job runner.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_CONFIG = 1


def _fail(command: str, message: str) -> NoReturn:
    typer.echo(f"zilean {command}: {message}", err=True)
    raise typer.Exit(EXIT_CONFIG)


def _run(command: str, body: Callable[[], None]) -> None:
    """Run a service body, turning configuration and schema errors into a clean exit."""
    try:
        body()
    except ZileanError as exc:
        _fail(command, exc.message)
    except KeyboardInterrupt:
        pass


def _service(service: Service, runtime: ScriptRuntime | None = None) -> None:
    configure_logging(str(service))
    settings = load_settings(service, os.environ, runtime=runtime)
    if isinstance(settings, WorkerSettings | ScriptWorkerSettings):
        from zilean.services.workers import run_worker

        asyncio.run(run_worker(service, settings))
    else:
        from zilean.services.http_services import run_http_service

        asyncio.run(run_http_service(service, settings))


@app.command()
def up(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the embedded Postgres and generated keys live.", show_default=False
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address of the local origin.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the local origin.")] = 8090,
) -> None:
    """Run all of Zilean on this machine (embedded Postgres unless DATABASE_URL is set).

    The data directory defaults to $XDG_DATA_HOME/zilean (~/.local/share/zilean).
    """
    from zilean.services.up import UpOptions, default_data_dir, run_up

    configure_logging("up")
    options = UpOptions(data_dir=(data_dir or default_data_dir()).resolve(), host=host, port=port)
    _run("up", lambda: run_up(options, os.environ))


@app.command()
def core() -> None:
    """Run the admin API, scheduler and migrations (CORE_ADDR, default :8091)."""
    _run("core", lambda: _service(Service.CORE))


@app.command()
def ui() -> None:
    """Run the admin UI and the login pages (UI_ADDR, default :8090)."""
    _run("ui", lambda: _service(Service.UI))


@app.command()
def worker() -> None:
    """Run HTTP jobs from the `default` queue."""
    _run("worker", lambda: _service(Service.WORKER))


@app.command("script-worker")
def script_worker(
    runtime: Annotated[ScriptRuntime, typer.Option(help="The script runtime this worker runs.")],
) -> None:
    """Run script jobs of one runtime from its own queue."""
    _run("script-worker", lambda: _service(runtime.service, runtime))


@app.command()
def mcp() -> None:
    """Run the MCP endpoint for AI agents (MCP_ADDR, default :8092)."""
    _run("mcp", lambda: _service(Service.MCP))


@app.command()
def webhook() -> None:
    """Run the public inbound webhook endpoint (WEBHOOK_ADDR, default :8093)."""
    _run("webhook", lambda: _service(Service.WEBHOOK))


@app.command()
def migrate() -> None:
    """Apply database migrations and exit (core does this on every start)."""

    def body() -> None:
        configure_logging("migrate")
        settings = load_settings(Service.CORE, os.environ)
        assert isinstance(settings, CoreSettings)
        from zilean.db.migrate import migrate as apply

        apply(settings.database_url)

    _run("migrate", body)


@app.command("hash-password")
def hash_password_command() -> None:
    """Print a bcrypt hash (cost 10) of a password read from a prompt, or from stdin if piped."""
    # Imported here, like each service's module: a worker process never loads bcrypt.
    from zilean.auth.passwords import MAX_PASSWORD_BYTES, hash_password

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Repeat: ") != password:
            _fail("hash-password", "the passwords do not match")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        _fail("hash-password", "the password is empty")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        _fail("hash-password", f"the password is longer than {MAX_PASSWORD_BYTES} bytes")
    typer.echo(hash_password(password))


@app.command("gen-key")
def gen_key() -> None:
    """Print a new SETTINGS_ENCRYPTION_KEY (32 random bytes, base64)."""
    typer.echo(generate_master_key())


@app.command("derive-script-key")
def derive_script_key_command() -> None:
    """Print the SCRIPT_SECRETS_KEY derived from SETTINGS_ENCRYPTION_KEY (env, or stdin)."""
    value = os.environ.get("SETTINGS_ENCRYPTION_KEY") or sys.stdin.readline().strip()
    if not value:
        _fail("derive-script-key", "SETTINGS_ENCRYPTION_KEY is required (environment or stdin)")
    try:
        master = decode_key("SETTINGS_ENCRYPTION_KEY", value)
    except ZileanError as exc:
        _fail("derive-script-key", exc.message)
    typer.echo(encode_key(derive_script_key(master)))


def main() -> None:
    app()
