"""A first boot nobody can be locked out of: the real `zilean up` and CLI as subprocesses,
sign-in through the real login form over HTTP."""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.acceptance.test_up import PASSWORD, READY, processes_using
from tests.support.browser_forms import sign_in_live
from tests.support.cli import base_environment, run_cli, spawn_cli, wait_for_text
from tests.support.servers import free_port
from zilean.auth.bootstrap import seed_super_admin
from zilean.auth.passwords import hash_password, verify_password
from zilean.auth.sessions import create_session
from zilean.auth.users import insert_user
from zilean.db.tables import audit_log, sessions, users

pytestmark = pytest.mark.acceptance

NEW_PASSWORD = r"New temporary password for (\S+): (\S+)"
CLI_TIMEOUT = 90.0  # seconds: the CLI may start the embedded Postgres


@contextmanager
def signed_in(base: str, email: str, password: str) -> Iterator[httpx.Client]:
    client = sign_in_live(base, email, password)
    assert client is not None, f"{email} could not sign in"
    with closing(client):
        yield client


def wait_for_call(client: httpx.Client, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the job's newest attempt is finished; return it."""
    deadline = time.monotonic() + timeout
    while True:
        calls = client.get(f"/api/jobs/{job_id}/calls").json()
        if calls and calls[0]["finalized_at"] is not None:
            return dict(calls[0])
        assert time.monotonic() < deadline, f"no finished attempt for {job_id}: {calls}"
        time.sleep(0.2)


def test_a_taken_port_stops_up_before_anything_exists_and_the_next_boot_lets_the_admin_in(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        taken = run_cli(
            ["up", "--data-dir", str(data_dir), "--port", str(port)],
            base_environment(),
            timeout=CLI_TIMEOUT,
        )
    assert taken.returncode == 1
    assert f"port {port} is already in use" in taken.stderr
    assert "--port" in taken.stderr
    assert not data_dir.exists()  # no database, no keys, no account whose password is lost

    args = ["up", "--data-dir", str(data_dir), "--port", str(free_port())]
    with spawn_cli(args, base_environment()) as up:
        base = up.wait_for(READY).group(1)
        email, password = up.wait_for(PASSWORD).groups()
        with signed_in(base, email, password) as client:
            me = client.get("/api/account/me").json()
        assert (me["email"], me["is_super_admin"]) == ("admin@localhost", True)
        assert up.stop() == 0


def test_a_first_boot_stopped_before_ready_still_leaves_a_known_password(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    args = ["up", "--data-dir", str(data_dir), "--port", str(free_port())]
    with spawn_cli(args, base_environment()) as first:
        # Migrations are applied well before the origin answers: stop the start half-way.
        wait_for_text(data_dir / "zilean.log", "migrations applied")
        assert first.stop(signal.SIGINT) == 0
    shown = re.search(PASSWORD, first.output)

    with spawn_cli(args, base_environment()) as second:
        base = second.wait_for(READY).group(1)
        # Either the interrupted boot got as far as creating (and showing) the account, or
        # it created nothing and this boot does: never an account with an unseen password.
        if shown is None:
            email, password = second.wait_for(PASSWORD).groups()
        else:
            email, password = shown.groups()
            assert re.search(PASSWORD, second.output) is None
        with signed_in(base, email, password) as client:
            assert client.get("/api/account/me").status_code == 200
        assert second.stop() == 0


def test_reset_admin_password_recovers_access_while_up_runs_and_after_it_stops(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    env = base_environment()
    args = ["up", "--data-dir", str(data_dir), "--port", str(free_port())]
    reset = ["reset-admin-password", "--data-dir", str(data_dir)]
    with spawn_cli(args, env) as up:
        base = up.wait_for(READY).group(1)
        email, lost = up.wait_for(PASSWORD).groups()
        old_session = sign_in_live(base, email, lost)
        assert old_session is not None

        result = run_cli(reset, env, timeout=CLI_TIMEOUT)
        assert result.returncode == 0, result.stderr
        match = re.search(NEW_PASSWORD, result.stdout)
        assert match
        assert match.group(1) == email
        temporary = match.group(2)

        with closing(old_session):
            ended = old_session.get("/api/account/me")  # its sessions ended: back to sign-in
        assert (ended.status_code, ended.headers["location"]) == (302, "/login")
        assert sign_in_live(base, email, lost) is None
        # `zilean up` still has its database: the borrowed server was not stopped.
        with signed_in(base, email, temporary) as client:
            assert client.get("/api/account/me").json()["must_change_password"] is True
            assert client.get("/api/jobs").status_code == 403  # until the password is changed
            changed = client.post(
                "/api/account/change-password",
                json={"current_password": temporary, "new_password": "a password of my own"},
            )
            assert changed.status_code == 204
            entries = client.get("/api/audit-log", params={"action": "user.password_reset"}).json()[
                "entries"
            ]
        assert [(e["actor_user_id"], e["after"]) for e in entries][-1] == (None, {"by": "console"})
        assert up.stop() == 0

    # Stopped: the command starts the embedded Postgres itself, and stops it again.
    chosen = run_cli(
        [*reset, "--password-stdin"], env, stdin="chosen at the console\n", timeout=CLI_TIMEOUT
    )
    assert chosen.returncode == 0, chosen.stderr
    assert f"Password changed for {email}" in chosen.stdout
    assert "chosen at the console" not in chosen.stdout + chosen.stderr
    assert not processes_using(data_dir / "postgres")
    with spawn_cli(args, env) as again:
        base = again.wait_for(READY).group(1)
        with signed_in(base, email, "chosen at the console") as client:
            assert client.get("/api/account/me").json()["must_change_password"] is False
        assert again.stop() == 0
    assert re.search(PASSWORD, again.output) is None


def test_reset_admin_password_refuses_a_data_directory_without_a_database(tmp_path: Path) -> None:
    result = run_cli(["reset-admin-password", "--data-dir", str(tmp_path)], base_environment())
    assert result.returncode == 1
    assert f"no Zilean database in {tmp_path}" in result.stderr
    assert not (tmp_path / "postgres").exists()  # no empty cluster started in its place


async def test_reset_admin_password_works_on_database_url(
    database_url: str, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        await seed_super_admin(conn, "root@example.com", hash_password("forgotten password"))
        other = await insert_user(
            conn,
            "Ops@Example.com",
            status="active",
            password_hash=hash_password("another lost one"),
            must_change_password=False,
            is_super_admin=False,
        )
        await create_session(conn, other, ip=None, user_agent=None)
    env = base_environment(DATABASE_URL=database_url)

    by_default = run_cli(["reset-admin-password"], env)
    by_email = run_cli(["reset-admin-password", "--email", "ops@example.com"], env)
    unknown = run_cli(["reset-admin-password", "--email", "nobody@example.com"], env)

    assert by_default.returncode == 0, by_default.stderr
    assert by_email.returncode == 0, by_email.stderr
    root = re.search(NEW_PASSWORD, by_default.stdout)
    ops = re.search(NEW_PASSWORD, by_email.stdout)
    assert root
    assert root.group(1) == "root@example.com"
    assert ops
    assert ops.group(1) == "Ops@Example.com"
    assert unknown.returncode == 1
    assert "no user has the email nobody@example.com" in unknown.stderr
    async with engine.connect() as conn:
        stored = {
            row.email: row
            for row in await conn.execute(select(users.c.id, users.c.email, users.c.password_hash))
        }
        left = (await conn.execute(select(func.count()).select_from(sessions))).scalar_one()
        audited = (
            await conn.execute(
                select(audit_log.c.resource_id, audit_log.c.actor_user_id, audit_log.c.after)
            )
        ).all()
    assert verify_password(root.group(2), stored["root@example.com"].password_hash)
    assert verify_password(ops.group(2), stored["Ops@Example.com"].password_hash)
    assert left == 0  # ops's session ended
    assert sorted((row.resource_id, row.actor_user_id, row.after) for row in audited) == sorted(
        (str(user.id), None, {"by": "console"}) for user in stored.values()
    )


def test_seed_job_inserts_the_sample_job_once_and_it_runs(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = base_environment(SEED_JOB="1")
    args = ["up", "--data-dir", str(data_dir), "--port", str(free_port())]
    with spawn_cli(args, env) as up:
        base = up.wait_for(READY).group(1)
        email, password = up.wait_for(PASSWORD).groups()
        with signed_in(base, email, password) as client:
            jobs = client.get("/api/jobs").json()
            assert len(jobs) == 1
            job = jobs[0]
            # httpbin.org when this machine reaches it; otherwise Zilean's own health check.
            assert (job["name"], job["url"]) in {
                ("smoke-test-httpbin", "https://httpbin.org/get"),
                ("smoke-test-local", f"{base}/healthz"),
            }
            assert (job["schedule_type"], job["cron_expression"]) == ("cron", "*/5 * * * *")
            assert (job["http_method"], job["enabled"]) == ("GET", True)
            if job["name"] == "smoke-test-local":
                assert "httpbin.org/get is not reachable" in up.output  # said in the terminal
            assert client.post(f"/api/jobs/{job['id']}/run").json()["queued"] == 1
            call = wait_for_call(client, job["id"])
            assert (call["state"], call["last_call"]["status_code"]) == ("succeeded", 200)
            assert client.delete(f"/api/jobs/{job['id']}").status_code == 204
        assert up.stop() == 0

    # Still set: neither a second copy nor, once deleted, the job again.
    with spawn_cli(args, env) as again:
        base = again.wait_for(READY).group(1)
        with signed_in(base, email, password) as client:
            assert client.get("/api/jobs").json() == []
        wait_for_text(data_dir / "zilean.log", "the sample job was inserted before")
        assert again.stop() == 0
