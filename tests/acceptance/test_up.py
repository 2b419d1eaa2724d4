"""`zilean up` end to end: the real CLI, a real embedded Postgres, real HTTP."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from tests.support.cli import base_environment, spawn_cli, wait_for_text
from tests.support.servers import free_port
from zilean.db.embedded import embedded_postgres

pytestmark = pytest.mark.acceptance

READY = r"Zilean is ready at (http://127\.0\.0\.1:\d+)"
PASSWORD = r"Sign in as (\S+) with password: (\S+)"


def processes_using(path: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(str(path) in part for part in cmdline):
            found.append(process)
    return found


def zilean_children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_up_runs_everything_keeps_data_across_restarts_and_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    env = base_environment(TZ="Europe/Paris")
    args = ["up", "--data-dir", str(data_dir), "--port", str(port)]
    log_file = data_dir / "zilean.log"

    with spawn_cli(args, env) as first:
        base = first.wait_for(READY).group(1)
        username, password = first.wait_for(PASSWORD).groups()
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/api/meta").json()["timezone"] == "Europe/Paris"
        assert username == "admin@localhost"
        # The HTTP worker child started, and logs to the same file as its parent.
        wait_for_text(log_file, r'"queues": \["default"\].*"service": "worker"')
        children = zilean_children(first.process.pid)
        assert children
        assert first.stop(signal.SIGINT) == 0
    # The terminal shows the banner and warnings; the info lines go to the file only.
    assert "migrations applied" in log_file.read_text()
    assert "migrations applied" not in first.output
    assert password not in log_file.read_text()  # shown once, in the terminal only

    assert (data_dir / "settings-encryption.key").stat().st_mode & 0o777 == 0o600
    assert (data_dir / "script-secrets.key").stat().st_mode & 0o777 == 0o600
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not processes_using(data_dir / "postgres")

    with spawn_cli([*args, "--log-level", "info"], env) as second:
        base = second.wait_for(READY).group(1)
        assert httpx.get(f"{base}/healthz").status_code == 200
        second.wait_for("migrations already up to date")  # full logs in the terminal
        assert second.stop(signal.SIGTERM) == 0
    assert "migrations applied" in (data_dir / "zilean.log.1").read_text()  # the first run's
    assert "password" not in second.output.lower().replace("admin_password_hash", "")
    assert password not in second.output


def sampled_processes(url: str) -> dict[int, set[tuple[str, ...]]]:
    """Per process id, the distinct sets of services its stored samples were shared by."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT pid, process_services FROM worker_metrics").fetchall()
    found: dict[int, set[tuple[str, ...]]] = {}
    for pid, services in rows:
        found.setdefault(pid, set()).add(tuple(services))
    return found


def test_up_uses_an_external_postgres_and_samples_each_process_once(tmp_path: Path) -> None:
    with embedded_postgres(tmp_path / "external-pg", database="zilean_ext") as url:
        data_dir = tmp_path / "data"
        env = base_environment(DATABASE_URL=url, TZ="Asia/Tokyo")
        args = ["up", "--data-dir", str(data_dir), "--port", str(free_port())]
        with spawn_cli(args, env) as running:
            base = running.wait_for(READY).group(1)
            assert httpx.get(f"{base}/api/meta").json()["timezone"] == "Asia/Tokyo"
            # Three processes sample themselves: the origin and its two worker children.
            deadline = time.monotonic() + 30
            while len(found := sampled_processes(url)) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert running.stop() == 0
        # Each stores one measurement under all the services it hosts, never one apiece.
        assert found.pop(running.process.pid) == {("core", "ui", "mcp", "webhook")}
        scripts, worker = sorted(hosted for [hosted] in map(list, found.values()))
        assert worker == ("worker",)
        assert scripts[0] == "script-worker-bash"  # bash is always installed
        assert all(service.startswith("script-worker-") for service in scripts)
        assert not (data_dir / "postgres").exists()
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT email FROM users WHERE is_bootstrap").fetchone()
        assert row == ("admin@localhost",)
