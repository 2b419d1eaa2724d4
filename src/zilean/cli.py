"""The `zilean` command: one subcommand per service, plus key and password helpers.

Built on argparse rather than a CLI framework: every service process starts here, and
a framework (with the terminal-rendering stack it pulls in) cost each of them ~13 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from zilean.config import (
    CoreSettings,
    ScriptRuntime,
    ScriptWorkerSettings,
    Service,
    WorkerSettings,
    decode_key,
    load_settings,
    script_worker_service,
)
from zilean.crypto.keys import derive_script_key, encode_key, generate_master_key
from zilean.errors import ZileanError
from zilean.logs import LEVELS, LOG_LEVEL_VARIABLE, configure_logging

EXIT_CONFIG = 1


def _fail(command: str, message: str) -> NoReturn:
    print(f"zilean {command}: {message}", file=sys.stderr)
    raise SystemExit(EXIT_CONFIG)


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

        run_worker(service, settings)
    else:
        from zilean.services.http_services import run_http_service

        asyncio.run(run_http_service(service, settings))


def up(args: argparse.Namespace) -> None:
    """Run all of Zilean on this machine (embedded Postgres unless DATABASE_URL is set).

    The data directory defaults to $XDG_DATA_HOME/zilean (~/.local/share/zilean). The
    terminal shows warnings and the ready banner; full logs go to <data-dir>/zilean.log.
    """
    from zilean.services.up import DEFAULT_LOG_LEVEL, UpOptions, default_data_dir, run_up

    data_dir: Path = (args.data_dir or default_data_dir()).resolve()
    options = UpOptions(
        data_dir=data_dir,
        host=args.host,
        port=args.port,
        log_level=args.log_level or os.environ.get(LOG_LEVEL_VARIABLE) or DEFAULT_LOG_LEVEL,
    )
    _run("up", lambda: run_up(options, os.environ))


def reset_admin_password(args: argparse.Namespace) -> None:
    """Give the Super Admin (or --email) a new password and end their sessions.

    Works on the data directory of `zilean up` (also while it runs), or on DATABASE_URL.
    Prints a temporary password to change at sign-in, unless --password-stdin gives one.
    """
    from zilean.services.reset_admin import reset_admin_password as reset
    from zilean.services.up import default_data_dir

    def body() -> None:
        configure_logging("reset-admin-password", default="warning")
        password = None
        if args.password_stdin:
            password = (
                getpass.getpass("New password: ")
                if sys.stdin.isatty()
                else sys.stdin.readline().rstrip("\r\n")
            )
            if not password:
                _fail("reset-admin-password", "the password read from stdin is empty")
        data_dir = (args.data_dir or default_data_dir()).resolve()
        done = reset(data_dir, os.environ, email=args.email, password=password)
        if done.temporary:
            print(f"New temporary password for {done.email}: {done.password}")
            print("Sign in with it and choose your own. Every session of this account has ended.")
        else:
            print(f"Password changed for {done.email}. Every session of this account has ended.")

    _run("reset-admin-password", body)


def core(args: argparse.Namespace) -> None:
    """Run the admin API, scheduler and migrations (CORE_ADDR, default :8091)."""
    _run("core", lambda: _service(Service.CORE))


def ui(args: argparse.Namespace) -> None:
    """Run the admin UI and the login pages (UI_ADDR, default :8090)."""
    _run("ui", lambda: _service(Service.UI))


def worker(args: argparse.Namespace) -> None:
    """Run HTTP jobs from the `default` queue."""
    _run("worker", lambda: _service(Service.WORKER))


def script_worker(args: argparse.Namespace) -> None:
    """Run script jobs of one runtime from its own queue (repeat --runtime for several)."""
    runtimes = list(dict.fromkeys(ScriptRuntime(name) for name in args.runtime))

    def body() -> None:
        from zilean.jobkinds.script.runtimes import report_unavailable

        label = str(script_worker_service(runtimes[0])) if len(runtimes) == 1 else "script-worker"
        configure_logging(label)
        services: list[tuple[Service, WorkerSettings | ScriptWorkerSettings]] = []
        for runtime in runtimes:
            settings = load_settings(script_worker_service(runtime), os.environ, runtime=runtime)
            assert isinstance(settings, ScriptWorkerSettings)
            services.append((script_worker_service(runtime), settings))
        for runtime in runtimes:
            report_unavailable(runtime, os.environ, none_left="script worker can run no script")
        from zilean.services.workers import run_workers

        run_workers(services)

    _run("script-worker", body)


def mcp(args: argparse.Namespace) -> None:
    """Run the MCP endpoint for AI agents (MCP_ADDR, default :8092)."""
    _run("mcp", lambda: _service(Service.MCP))


def webhook(args: argparse.Namespace) -> None:
    """Run the public inbound webhook endpoint (WEBHOOK_ADDR, default :8093)."""
    _run("webhook", lambda: _service(Service.WEBHOOK))


def migrate(args: argparse.Namespace) -> None:
    """Apply database migrations and exit (core does this on every start)."""

    def body() -> None:
        configure_logging("migrate")
        settings = load_settings(Service.CORE, os.environ)
        assert isinstance(settings, CoreSettings)
        from zilean.db.migrate import migrate as apply

        apply(settings.database_url)

    _run("migrate", body)


def hash_password_command(args: argparse.Namespace) -> None:
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
    print(hash_password(password))


def gen_key(args: argparse.Namespace) -> None:
    """Print a new SETTINGS_ENCRYPTION_KEY (32 random bytes, base64)."""
    print(generate_master_key())


def derive_script_key_command(args: argparse.Namespace) -> None:
    """Print the SCRIPT_SECRETS_KEY derived from SETTINGS_ENCRYPTION_KEY (env, or stdin)."""
    value = os.environ.get("SETTINGS_ENCRYPTION_KEY") or sys.stdin.readline().strip()
    if not value:
        _fail("derive-script-key", "SETTINGS_ENCRYPTION_KEY is required (environment or stdin)")
    try:
        master = decode_key("SETTINGS_ENCRYPTION_KEY", value)
    except ZileanError as exc:
        _fail("derive-script-key", exc.message)
    print(encode_key(derive_script_key(master)))


def _port(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535 (got {value!r})")
    return int(value)


Command = Callable[[argparse.Namespace], None]
COMMANDS: dict[str, Command] = {
    "up": up,
    "core": core,
    "ui": ui,
    "worker": worker,
    "script-worker": script_worker,
    "mcp": mcp,
    "webhook": webhook,
    "migrate": migrate,
    "hash-password": hash_password_command,
    "reset-admin-password": reset_admin_password,
    "gen-key": gen_key,
    "derive-script-key": derive_script_key_command,
}


def _summary(command: Command) -> str:
    return (command.__doc__ or "").strip().splitlines()[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zilean", description="Zilean: a self-hosted scheduled job runner."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = commands.add_parser(name, help=_summary(command), description=command.__doc__)
        sub.set_defaults(handler=command)
        if name in ("up", "reset-admin-password"):
            sub.add_argument(
                "--data-dir",
                type=Path,
                default=None,
                help="where the embedded Postgres, generated keys and logs live",
            )
        if name == "up":
            sub.add_argument("--host", default="127.0.0.1", help="address of the local origin")
            sub.add_argument(
                "--port", type=_port, default=8090, help="port of the local origin (default 8090)"
            )
            sub.add_argument(
                "--log-level",
                choices=list(LEVELS),
                default=None,
                help="what reaches the terminal (default warning, or ZILEAN_LOG_LEVEL); "
                "the log file in the data directory always has info and above",
            )
        elif name == "reset-admin-password":
            sub.add_argument(
                "--email", default=None, help="whose password to reset (default: the Super Admin)"
            )
            sub.add_argument(
                "--password-stdin",
                action="store_true",
                help="read the new password from stdin instead of generating a temporary one",
            )
        elif name == "script-worker":
            sub.add_argument(
                "--runtime",
                required=True,
                action="append",
                choices=[str(runtime) for runtime in ScriptRuntime],
                help="a script runtime this worker runs; repeat it to run several in one process",
            )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        raise SystemExit(2)
    args.handler(args)
