"""The standalone services: core migrates and serves; the others wait for it."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.support.cli import base_environment, spawn_cli
from tests.support.servers import free_port
from zilean.auth.passwords import hash_password

pytestmark = pytest.mark.acceptance

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def test_ui_waits_for_core_to_migrate_then_serves(empty_database_url: str) -> None:
    ui_port, core_port = free_port(), free_port()
    ui_env = base_environment(DATABASE_URL=empty_database_url, UI_ADDR=f"127.0.0.1:{ui_port}")
    core_env = base_environment(
        DATABASE_URL=empty_database_url,
        CORE_ADDR=f"127.0.0.1:{core_port}",
        SETTINGS_ENCRYPTION_KEY=KEY,
        ADMIN_USERNAME="ops@example.com",
        ADMIN_PASSWORD_HASH=hash_password("pw"),
        TZ="America/New_York",
    )
    with spawn_cli(["ui"], ui_env) as ui:
        ui.wait_for("waiting for core to apply migrations")
        with spawn_cli(["core"], core_env) as core:
            core.wait_for("migrations applied")
            core.wait_for("Uvicorn running")
            meta = httpx.get(f"http://127.0.0.1:{core_port}/api/meta").json()
            assert meta["timezone"] == "America/New_York"
            ui.wait_for("Uvicorn running", timeout=30)
            assert httpx.get(f"http://127.0.0.1:{ui_port}/healthz").status_code == 200
            assert core.stop(signal.SIGTERM) == 0
        assert ui.stop(signal.SIGTERM) == 0


def test_the_worker_logs_its_queues_and_stops_on_sigterm(database_url: str) -> None:
    env = base_environment(DATABASE_URL=database_url, SETTINGS_ENCRYPTION_KEY=KEY)
    with spawn_cli(["worker"], env) as worker:
        worker.wait_for(r'"queues": \["default"\]')
        worker.wait_for(r'"channel": "zilean.queue.default"')  # listening: ready for work
        assert worker.stop(signal.SIGTERM) == 0


def test_a_script_worker_starts_for_its_own_queue(database_url: str) -> None:
    env = base_environment(DATABASE_URL=database_url, SCRIPT_SECRETS_KEY=KEY)
    with spawn_cli(["script-worker", "--runtime", "python"], env) as worker:
        worker.wait_for(r'"service": "script-worker-python"')
        worker.wait_for(r'"queues": \["scripts-python"\]')
        assert worker.stop(signal.SIGINT) == 0
