"""Schemathesis against a live `zilean core`: every operation of `/api/openapi.json`, signed
in with a Super Admin's API token, with the checks `schemathesis.toml` enables.

It finds what hand-written tests miss: a 500 on an input nobody thought of, a response
the schema does not describe, a request the schema forbids that the API accepts.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import KEY
from tests.support.actors import build_cast
from tests.support.cli import base_environment, spawn_cli
from tests.support.servers import free_port
from zilean.auth.sessions import SESSION_COOKIE

REPOSITORY = Path(__file__).resolve().parents[2]
# The whole run, examples and fuzzing of every operation; a wedged run is a failure.
RUN_TIMEOUT = 600.0  # seconds


async def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    database_url: str, engine: AsyncEngine
) -> None:
    cast = await build_cast(engine)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = base_environment(
        DATABASE_URL=database_url, CORE_ADDR=f"127.0.0.1:{port}", SETTINGS_ENCRYPTION_KEY=KEY
    )
    with spawn_cli(["core"], env) as core:
        core.wait_for("Uvicorn running")
        async with httpx.AsyncClient(
            base_url=base, cookies={SESSION_COOKIE: cast.alice.session}
        ) as alice:
            token, identifiers = await fuzzing_identities(alice)
            bearer = {"Authorization": f"Bearer {token}"}
            schemathesis = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
            assert schemathesis, "schemathesis is a dev dependency: pip install -e '.[dev]'"
            run = await asyncio.to_thread(
                subprocess.run,
                [schemathesis, "run", f"{base}/api/openapi.json", "--no-color"],
                cwd=REPOSITORY,  # where schemathesis.toml is
                env={**env, "ZILEAN_API_TOKEN": token, **identifiers},
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                check=False,
            )
            still_valid = await alice.get("/api/jobs", headers=bearer)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
    # Locked out halfway, the fuzzer would have seen only 401s and still passed.
    assert still_valid.status_code == 200, still_valid.text
    assert "Authentication failed" not in run.stdout


async def fuzzing_identities(alice: httpx.AsyncClient) -> tuple[str, dict[str, str]]:
    """The bearer token the fuzzer uses, and the ids `schemathesis.toml` pins path
    parameters to: decoys for what could lock the fuzzer out, a real job for the rest."""

    async def created(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await alice.post(path, json=body)
        assert response.status_code == 201, response.text
        payload: dict[str, Any] = response.json()
        return payload

    # A token cannot carry Super Admin: a role with every permission stands in.
    everything = (await alice.get("/api/roles/permissions")).json()
    role = await created("/api/roles", {"name": "All", "permissions": everything})
    decoy_role = await created("/api/roles", {"name": "Decoy", "permissions": ["jobs:read"]})
    token = await created("/api/tokens", {"name": "fuzzer", "role_id": role["id"]})
    decoy_token = await created("/api/tokens", {"name": "decoy", "role_id": decoy_role["id"]})
    decoy_user = await created(
        "/api/users", {"email": "decoy@example.com", "role_ids": [decoy_role["id"]]}
    )
    job = await created(
        "/api/jobs",
        {"name": "fuzzed", "url": "http://127.0.0.1:9/unreachable", "cron_expression": "@daily"},
    )
    return token["secret"], {
        "ZILEAN_DECOY_TOKEN_ID": decoy_token["token"]["id"],
        "ZILEAN_DECOY_ROLE_ID": decoy_role["id"],
        "ZILEAN_DECOY_USER_ID": decoy_user["user"]["id"],
        "ZILEAN_JOB_ID": job["id"],
    }
