"""A real `zilean script-worker` for the script job tests, and reading what it recorded."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from tests.integration.conftest import KEY
from tests.support.actors import client_for
from tests.support.cli import RunningProcess, base_environment, spawn_cli
from tests.support.monitoring import eventually
from zilean.crypto.keys import derive_script_key, encode_key
from zilean.jobkinds.definitions import SCRIPT_KINDS

WORKER_START_WITHIN = 20.0  # seconds for a spawned worker to start consuming
FINISHED_WITHIN = 60.0  # seconds for an attempt to be recorded (a JVM takes seconds)
FINAL_STATES = {"succeeded", "failed", "cancelled"}
# Which `--runtime` runs each script job type, from the job kind table.
RUNTIME_OF = {str(kind.job_type): str(kind.runtime) for kind in SCRIPT_KINDS.values()}


def script_worker_environment(database_url: str, **extra: str) -> dict[str, str]:
    """What a script worker needs: the database and the script key derived from KEY."""
    script_key = encode_key(derive_script_key(base64.b64decode(KEY)))
    return base_environment(DATABASE_URL=database_url, SCRIPT_SECRETS_KEY=script_key, **extra)


@contextmanager
def script_worker(runtime: str, database_url: str, **extra: str) -> Iterator[RunningProcess]:
    """A live script worker for `runtime`, consuming its queue for the block."""
    env = script_worker_environment(database_url, **extra)
    with spawn_cli(["script-worker", "--runtime", runtime], env) as worker:
        worker.wait_for("queue.listening", timeout=WORKER_START_WITHIN)
        yield worker


async def create_script_job(app: FastAPI, session: str, **fields: Any) -> dict[str, Any]:
    body = {"name": "script", "cron_expression": "@yearly", **fields}
    async with client_for(app, session) as client:
        response = await client.post("/api/jobs", json=body)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


async def run_and_wait(
    app: FastAPI,
    session: str,
    job_id: str,
    worker: RunningProcess,
    *,
    count: int = 1,
    run: bool = True,
) -> list[dict[str, Any]]:
    """Run the job now (unless `run` is False), then wait until its history holds `count`
    finished entries; return the history, newest first."""
    async with client_for(app, session) as client:
        if run:
            queued = await client.post(f"/api/jobs/{job_id}/run")
            assert queued.status_code == 200, queued.text

        async def finished() -> list[dict[str, Any]] | None:
            assert worker.process.poll() is None, f"the worker exited:\n{worker.output}"
            response = await client.get(f"/api/jobs/{job_id}/calls", params={"limit": 100})
            assert response.status_code == 200, response.text
            calls: list[dict[str, Any]] = response.json()
            done = [call for call in calls if call["state"] != "running"]
            last_done = bool(done) and done[0]["state"] in FINAL_STATES
            return calls if len(done) >= count and last_done else None

        try:
            return await eventually(finished, within=FINISHED_WITHIN, what="the run's end")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nworker output:\n{worker.output}") from None


async def add_variable(
    client: httpx.AsyncClient, name: str, value: str, **flags: bool
) -> dict[str, Any]:
    response = await client.post(
        "/api/global-variables", json={"name": name, "value": value, **flags}
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created
