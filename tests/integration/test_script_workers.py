"""Script worker host checks, their status route, and real workers reporting themselves.

The host checks (`volumes_root_mounted`, `sandbox_enforced`) run against the real
filesystem and the real bubblewrap; the last tests spawn the real `zilean` CLI and
watch what it stores through the admin API.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import KEY
from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN
from tests.support.cli import RunningProcess, base_environment, spawn_cli
from tests.support.monitoring import eventually
from zilean.crypto.keys import derive_script_key, encode_key
from zilean.db.tables import script_worker_status
from zilean.jobkinds.script.host import sandbox_enforced, volumes_root_mounted
from zilean.monitoring.script_workers import HostChecks, report_status

INSTALL_BWRAP = (
    "bwrap is not on PATH: install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) "
    "so the sandbox self-test can run"
)
WORKER_START_WITHIN = 20.0  # seconds for a spawned worker to report itself
STATUS_KEYS = {"queue", "sandbox_enforced", "volumes_root_mounted", "updated_at", "stale"}


def real_bwrap() -> str:
    """Bubblewrap's path; its absence fails the test, since CI installs it."""
    found = shutil.which("bwrap")
    if found is None:
        pytest.fail(INSTALL_BWRAP)
    return found


def leftovers(root: Path) -> list[str]:
    return sorted(entry.name for entry in root.iterdir())


# --- volumes_root_mounted ----------------------------------------------------------------


def test_an_unset_volumes_root_is_not_mounted() -> None:
    assert volumes_root_mounted(None) is False


def test_a_missing_path_or_a_file_is_not_mounted(tmp_path: Path) -> None:
    a_file = tmp_path / "volumes.txt"
    a_file.write_text("not a directory")
    assert volumes_root_mounted(tmp_path / "missing") is False
    assert volumes_root_mounted(a_file) is False
    assert volumes_root_mounted(Path("/")) is False  # never the filesystem root


def test_a_writable_directory_is_mounted_and_the_probe_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "volumes"
    root.mkdir()
    (root / "reports").mkdir()  # an existing volume stays untouched
    assert volumes_root_mounted(root) is True
    assert leftovers(root) == ["reports"]


PROBE = (
    "import sys; from pathlib import Path; "
    "from zilean.jobkinds.script.host import volumes_root_mounted; "
    "print('mounted:', volumes_root_mounted(Path(sys.argv[1])))"
)


def check_without_privileges(root: Path, *bwrap_args: str) -> str:
    """Run `volumes_root_mounted(root)` in a child Python holding no capabilities; return
    its output. Without CAP_DAC_OVERRIDE even uid 0 is refused by mode bits, so this works
    whether or not the tests run as root."""
    result = subprocess.run(
        [real_bwrap(), "--unshare-user", "--cap-drop", "ALL", "--dev-bind", "/", "/",
         *bwrap_args, sys.executable, "-c", PROBE, str(root)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_a_directory_this_user_cannot_write_is_not_mounted(tmp_path: Path) -> None:
    root = tmp_path / "volumes"
    root.mkdir()
    root.chmod(0o555)
    try:
        if os.geteuid() == 0:
            # Root writes through mode bits: ask a child that holds no capabilities.
            output = check_without_privileges(root)
            assert "mounted: False" in output
            assert "not writable by this process" in output
        else:
            assert volumes_root_mounted(root) is False
    finally:
        root.chmod(0o755)
    assert leftovers(root) == []


def test_a_read_only_mount_is_not_mounted(tmp_path: Path) -> None:
    root = tmp_path / "volumes"
    root.mkdir()
    output = check_without_privileges(root, "--ro-bind", str(root), str(root))
    assert "mounted: False" in output
    assert "not writable by this process" in output
    assert volumes_root_mounted(root) is True  # the same directory, writable outside


def test_a_root_under_a_directory_this_user_cannot_search_is_not_mounted(
    tmp_path: Path,
) -> None:
    locked = tmp_path / "locked"
    root = locked / "volumes"
    root.mkdir(parents=True)
    locked.chmod(0o000)
    try:
        output = check_without_privileges(root)
    finally:
        locked.chmod(0o755)
    assert "mounted: False" in output
    assert "script volumes root" in output  # the warning names the unusable root


# --- sandbox_enforced --------------------------------------------------------------------


def test_a_disabled_sandbox_is_not_enforced() -> None:
    real_bwrap()
    assert sandbox_enforced(False) is False


def test_an_enabled_sandbox_without_bwrap_is_not_enforced(tmp_path: Path) -> None:
    assert sandbox_enforced(True, path=str(tmp_path)) is False


def test_an_enabled_sandbox_whose_self_test_fails_is_not_enforced(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'no user namespaces' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert sandbox_enforced(True, path=str(tmp_path)) is False


def test_an_enabled_sandbox_with_bubblewrap_is_enforced() -> None:
    real_bwrap()
    assert sandbox_enforced(True) is True


# --- /api/script-workers/status ----------------------------------------------------------


async def statuses(app: FastAPI, session: str) -> list[dict[str, Any]]:
    async with client_for(app, session) as client:
        response = await client.get("/api/script-workers/status")
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


async def test_status_lists_each_reporting_queue_and_marks_silence_stale(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    before = await statuses(core_app, cast.carol.session)
    await report_status(
        database_url, "scripts-bash", HostChecks(sandbox_enforced=True, volumes_root_mounted=False)
    )
    await report_status(
        database_url, "scripts-node", HostChecks(sandbox_enforced=False, volumes_root_mounted=True)
    )
    fresh = await statuses(core_app, cast.carol.session)
    async with engine.begin() as conn:
        await conn.execute(
            update(script_worker_status)
            .where(script_worker_status.c.queue == "scripts-bash")
            .values(updated_at=script_worker_status.c.updated_at - timedelta(minutes=4))
        )
    aged = await statuses(core_app, cast.carol.session)
    # A new report replaces the queue's row and makes it fresh again.
    await report_status(
        database_url, "scripts-bash", HostChecks(sandbox_enforced=False, volumes_root_mounted=True)
    )
    again = await statuses(core_app, cast.carol.session)
    async with client_for(core_app, cast.dave.session) as dave:
        refused = await dave.get("/api/script-workers/status")

    assert before == []
    assert [entry["queue"] for entry in fresh] == ["scripts-bash", "scripts-node"]
    bash = fresh[0]
    assert set(bash) == STATUS_KEYS
    assert (bash["sandbox_enforced"], bash["volumes_root_mounted"], bash["stale"]) == (
        True,
        False,
        False,
    )
    assert isinstance(datetime.fromisoformat(bash["updated_at"]), datetime)
    assert (aged[0]["stale"], aged[1]["stale"]) == (True, False)
    assert datetime.fromisoformat(bash["updated_at"]) - datetime.fromisoformat(
        aged[0]["updated_at"]
    ) == timedelta(minutes=4)
    assert len(again) == 2
    assert (again[0]["sandbox_enforced"], again[0]["volumes_root_mounted"]) == (False, True)
    assert again[0]["stale"] is False
    # dave's role holds user and role permissions, not scriptvolumes:read.
    assert (refused.status_code, refused.json()) == (403, FORBIDDEN)


# --- real workers ------------------------------------------------------------------------


def script_worker_environment(database_url: str, **extra: str) -> dict[str, str]:
    """What a script worker needs: the database and the script key derived from KEY."""
    script_key = encode_key(derive_script_key(base64.b64decode(KEY)))
    return base_environment(DATABASE_URL=database_url, SCRIPT_SECRETS_KEY=script_key, **extra)


async def wait_for_json(
    worker: RunningProcess,
    client: httpx.AsyncClient,
    path: str,
    accept: Callable[[Any], bool],
    what: str,
    **params: str,
) -> Any:
    """Poll `path` until `accept(body)` holds; return the body. A failure shows the
    worker's output, and so does a worker that exits while we wait."""

    async def check() -> Any:
        assert worker.process.poll() is None, f"the worker exited:\n{worker.output}"
        response = await client.get(path, params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        return body if accept(body) else None

    try:
        return await eventually(check, within=WORKER_START_WITHIN, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nworker output:\n{worker.output}") from None


@pytest.mark.acceptance
async def test_a_running_bash_worker_reports_its_checks_and_samples_itself(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    real_bwrap()
    volumes = tmp_path / "volumes"
    volumes.mkdir()
    env = script_worker_environment(
        database_url, SCRIPT_VOLUMES_ROOT=str(volumes), SCRIPT_SANDBOX_ENABLED="1"
    )
    with spawn_cli(["script-worker", "--runtime", "bash"], env) as worker:
        pid = worker.process.pid
        async with (
            client_for(core_app, cast.alice.session) as alice,
            client_for(core_app, cast.carol.session) as carol,
        ):
            status = await wait_for_json(
                worker,
                carol,
                "/api/script-workers/status",
                lambda body: any(e["queue"] == "scripts-bash" for e in body),
                "scripts-bash in the status list",
            )
            liveness = await wait_for_json(
                worker,
                alice,
                "/api/scripts/liveness",
                lambda body: body["bash"]["live"],
                "bash live",
            )
            sample = await wait_for_json(
                worker,
                carol,
                "/api/metrics/live",
                lambda body: body is not None,
                "a script-worker-bash sample",
                service="script-worker-bash",
            )
        code = worker.stop(signal.SIGTERM, timeout=30)
    assert status == [
        {
            "queue": "scripts-bash",
            "sandbox_enforced": True,
            "volumes_root_mounted": True,
            "updated_at": status[0]["updated_at"],
            "stale": False,
        }
    ]
    assert liveness["javascript"]["live"] is False  # only bash runs here
    assert (sample["service"], sample["pid"]) == ("script-worker-bash", pid)
    assert sample["rss_bytes"] > 0
    assert code == 0, worker.output
    assert leftovers(volumes) == []  # the writability probe cleaned up after itself


@pytest.mark.acceptance
async def test_a_running_http_worker_samples_itself_under_worker(
    core_app: FastAPI, database_url: str, cast: Cast
) -> None:
    env = base_environment(DATABASE_URL=database_url, SETTINGS_ENCRYPTION_KEY=KEY)
    with spawn_cli(["worker"], env) as worker:
        pid = worker.process.pid
        async with client_for(core_app, cast.carol.session) as carol:
            sample = await wait_for_json(
                worker,
                carol,
                "/api/metrics/live",
                lambda body: body is not None,
                "a worker sample",
                service="worker",
            )
            status = (await carol.get("/api/script-workers/status")).json()
        code = worker.stop(signal.SIGTERM, timeout=30)
    assert (sample["service"], sample["pid"]) == ("worker", pid)
    assert sample["cpu_percent"] >= 0
    assert status == []  # the HTTP worker has no script host checks to report
    assert code == 0, worker.output


@pytest.mark.acceptance
async def test_one_process_can_run_several_runtimes_each_reporting_on_its_own(
    core_app: FastAPI, database_url: str, cast: Cast
) -> None:
    env = script_worker_environment(database_url)
    argv = ["script-worker", "--runtime", "bash", "--runtime", "python"]
    with spawn_cli(argv, env) as worker:
        pid = worker.process.pid
        async with (
            client_for(core_app, cast.alice.session) as alice,
            client_for(core_app, cast.carol.session) as carol,
        ):
            status = await wait_for_json(
                worker,
                carol,
                "/api/script-workers/status",
                lambda body: len(body) == 2,
                "two script queues in the status list",
            )
            liveness = await wait_for_json(
                worker,
                alice,
                "/api/scripts/liveness",
                lambda body: body["bash"]["live"] and body["python"]["live"],
                "bash and python live",
            )
            samples = [
                await wait_for_json(
                    worker,
                    carol,
                    "/api/metrics/live",
                    lambda body: body is not None,
                    f"a {label} sample",
                    service=label,
                )
                for label in ("script-worker-bash", "script-worker-python")
            ]
        code = worker.stop(signal.SIGTERM, timeout=30)
    assert [entry["queue"] for entry in status] == ["scripts-bash", "scripts-python"]
    assert liveness["javascript"]["live"] is False
    assert [(s["service"], s["pid"]) for s in samples] == [
        ("script-worker-bash", pid),
        ("script-worker-python", pid),
    ]
    # Each runtime's lines carry its own label.
    assert '"service": "script-worker-bash"' in worker.output
    assert '"service": "script-worker-python"' in worker.output
    assert code == 0, worker.output
