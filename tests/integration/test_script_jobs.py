"""Script jobs end to end: created through the API, run by a real `zilean script-worker`
process, read back from `GET /api/jobs/{id}/calls`.

Each test starts its own worker on its own database. The runtimes are the real ones
(bash, python3, node, tsx, groovy); `.ci/run` installs them all, so a missing one fails
rather than skips in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.monitoring import eventually
from tests.support.script_workers import (
    RUNTIME_OF,
    add_variable,
    create_script_job,
    run_and_wait,
    script_worker,
)
from zilean.db.tables import script_volumes

# One script per job type that prints its arguments, each on a line.
PRINT_ARGS = {
    "bash": 'for arg in "$@"; do printf "%s\\n" "$arg"; done',
    "python": "import sys\nfor arg in sys.argv[1:]:\n    print(arg)",
    "javascript": "for (const arg of process.argv.slice(2)) console.log(arg)",
    "typescript": "const args: string[] = process.argv.slice(2)\nargs.forEach((a) => print(a))\n"
    + "function print(a: string): void { console.log(a) }",
    "groovy": "args.each { println it }",
}
ARGS = ["two words", "{{not_substituted}}", ""]
# The real interpreter first on PATH: a version manager's shim (pyenv) adds its own variables.
PLAIN_PATH = f"{Path(sys.executable).resolve().parent}:/usr/bin:/bin"
INTERPRETER_OF = {"bash": "bash", "python": "python3", "javascript": "node", "groovy": "groovy"}


def needs(program: str) -> None:
    if shutil.which(program) is None:
        pytest.fail(f"{program} is not installed: .ci/run installs every runtime")


@pytest.mark.parametrize("job_type", sorted(PRINT_ARGS))
async def test_each_runtime_runs_its_script_with_the_arguments_as_written(
    core_app: FastAPI, database_url: str, cast: Cast, job_type: str
) -> None:
    needs(INTERPRETER_OF.get(job_type, "node"))
    timeout = 20_000 if job_type == "groovy" else 10_000
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type=job_type,
        script_body=PRINT_ARGS[job_type],
        script_args=ARGS,
        exec_timeout_ms=timeout,
    )
    with script_worker(RUNTIME_OF[job_type], database_url) as worker:
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
    assert call["state"] == "succeeded", call
    last = call["last_call"]
    assert last["exit_code"] == 0
    assert last["stdout_snippet"] == "two words\n{{not_substituted}}\n\n"
    assert last["script_args"] == ARGS
    assert last["job_name"] == "script"
    assert last["timeout_ms"] == timeout
    assert last["error"] is None
    assert last["duration_ms"] is not None


async def test_a_non_zero_exit_fails_with_its_stderr_and_is_retried(
    core_app: FastAPI, database_url: str, cast: Cast
) -> None:
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="bash",
        script_body="echo boom >&2\nexit 3",
        retry_max_attempts=2,
        retry_base_delay_ms=1,
    )
    with script_worker("bash", database_url) as worker:
        calls = await run_and_wait(core_app, cast.alice.session, job["id"], worker, count=2)
    assert [call["state"] for call in calls] == ["failed", "retrying"]
    for call in calls:
        assert call["last_error"] == "script exited 3: boom\n"
        assert (call["last_call"]["exit_code"], call["last_call"]["stderr_snippet"]) == (
            3,
            "boom\n",
        )


async def test_a_timeout_kills_the_whole_process_group(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="bash",
        # A background grandchild that would outlive its parent, holding stdout open.
        script_body='sleep 300 &\necho $! > "$1"\nsleep 300',
        script_args=[str(pid_file)],
        exec_timeout_ms=1000,
        retry_enabled=False,
    )
    with script_worker("bash", database_url) as worker:
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
    assert call["state"] == "cancelled"  # retries are off
    assert call["last_error"] == "script timed out: after 1000 ms"
    assert call["last_call"]["exit_code"] is None
    assert 1000 <= call["duration_ms"] < 1000 + 5000
    grandchild = int(pid_file.read_text())

    async def gone() -> bool:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return True
        return False

    await eventually(gone, within=5, what="the grandchild's end")


async def test_output_beyond_the_cap_is_dropped_and_its_length_reported(
    core_app: FastAPI, database_url: str, cast: Cast
) -> None:
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="python",
        script_body="import sys\nsys.stdout.write('x' * 200_000)\nsys.stderr.write('e' * 70_000)",
    )
    with script_worker("python", database_url) as worker:
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
    last = call["last_call"]
    assert (last["stdout_length"], last["stderr_length"]) == (200_000, 70_000)
    assert last["stdout_snippet"] == "x" * 2000
    assert last["stderr_snippet"] == "e" * 2000


async def test_the_environment_is_exactly_the_documented_one(
    core_app: FastAPI, database_url: str, cast: Cast
) -> None:
    """Nothing of the worker's own environment but PATH, a plain variable for everyone,
    a secret only when opted in on both sides, and its value redacted however short."""
    async with client_for(core_app, cast.alice.session) as alice:
        await add_variable(alice, "region_name", "eu-west")
        await add_variable(alice, "OPTED", "q7z", is_secret=True, allow_in_scripts=True)
        await add_variable(alice, "ELIGIBLE", "unnamed", is_secret=True, allow_in_scripts=True)
        await add_variable(alice, "CLOSED", "closed-value", is_secret=True)
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="python",
        # What the process was started with (Python itself may add LC_CTYPE later).
        script_body=(
            "import json\n"
            "pairs = open('/proc/self/environ', 'rb').read().decode().split('\\0')\n"
            "print(json.dumps(dict(p.split('=', 1) for p in pairs if p), sort_keys=True))"
        ),
        script_secret_vars=["OPTED", "CLOSED"],
    )
    with script_worker("python", database_url, TZ="Europe/Paris", PATH=PLAIN_PATH) as worker:
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
    environment = json.loads(call["last_call"]["stdout_snippet"])
    assert set(environment) == {
        "PATH",
        "TZ",
        "ZILEAN_JOB_NAME",
        "ZILEAN_POOL_IDX",
        "ZILEAN_LOOP_ITERATION",
        "GLOBALVAR_REGION_NAME",
        "GLOBALVAR_OPTED",
    }  # no DATABASE_URL, no SCRIPT_SECRETS_KEY, no ELIGIBLE or CLOSED
    assert environment["ZILEAN_POOL_IDX"] == "0"  # set even at pool_count 1
    assert environment["ZILEAN_LOOP_ITERATION"] == "0"
    assert environment["ZILEAN_JOB_NAME"] == "script"
    assert environment["TZ"] == "Europe/Paris"
    assert environment["GLOBALVAR_REGION_NAME"] == "eu-west"
    assert environment["GLOBALVAR_OPTED"] == "REDACTED"  # the script saw q7z; the record not
    assert "q7z" not in json.dumps(call)


async def test_stdout_is_the_loop_signal(core_app: FastAPI, database_url: str, cast: Cast) -> None:
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="python",
        script_body=(
            "import json, os\n"
            "left = 2 - int(os.environ['ZILEAN_LOOP_ITERATION'])\n"
            "print(json.dumps({'result': {'remaining': left}}))"
        ),
        loop_enabled=True,
        loop_delay_ms=0,
    )
    with script_worker("python", database_url) as worker:
        calls = await run_and_wait(core_app, cast.alice.session, job["id"], worker, count=3)
    assert [call["loop_iteration"] for call in calls] == [2, 1, 0]
    assert {call["state"] for call in calls} == {"succeeded"}


# --- volumes and the sandbox ------------------------------------------------------------


async def make_volume(client: httpx.AsyncClient, name: str, max_mode: str) -> None:
    response = await client.post("/api/script-volumes", json={"name": name, "max_mode": max_mode})
    assert response.status_code == 201, response.text


def sandboxed(tmp_path: Path) -> dict[str, str]:
    """A script worker's environment with the sandbox on and a volumes root."""
    root = tmp_path / "volumes"
    root.mkdir(exist_ok=True)
    return {"SCRIPT_VOLUMES_ROOT": str(root), "SCRIPT_SANDBOX_ENABLED": "1"}


async def test_under_the_sandbox_a_ro_volume_refuses_writes_and_a_rw_one_takes_them(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    shutil.which("bwrap") or pytest.fail("bwrap is not installed: .ci/run installs it")
    async with client_for(core_app, cast.alice.session) as alice:
        await make_volume(alice, "shared", "rw")
        await make_volume(alice, "output", "rw")
    secret_file = tmp_path / "not-for-scripts.txt"
    secret_file.write_text("host data")
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="bash",
        script_body=(
            'echo x > "$ZILEAN_VOLUME_SHARED/try" 2>/dev/null && echo shared-written\n'
            'echo rw > "$ZILEAN_VOLUME_OUTPUT/result" && echo output-written\n'
            f"cat {secret_file} 2>/dev/null || echo host-file-hidden\n"
            "ls /proc | grep -c '^[0-9]'\n"
        ),
        capabilities={
            "volumes": [{"name": "shared", "mode": "ro"}, {"name": "output", "mode": "rw"}]
        },
    )
    env = sandboxed(tmp_path)
    with script_worker("bash", database_url, **env) as worker:
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
    assert call["state"] == "succeeded", call
    lines = call["last_call"]["stdout_snippet"].splitlines()
    assert lines[:2] == ["output-written", "host-file-hidden"]  # ro refused, host unseen
    assert int(lines[2]) <= 5  # its own pid namespace: bwrap's init, bash, ls, grep
    root = Path(env["SCRIPT_VOLUMES_ROOT"])
    assert (root / "output" / "result").read_text() == "rw\n"
    assert not (root / "shared" / "try").exists()


async def test_under_the_sandbox_one_run_cannot_see_another_runs_files(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    shutil.which("bwrap") or pytest.fail("bwrap is not installed: .ci/run installs it")
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="bash",
        pool_count=2,
        overlap_policy="allow",
        # Member 0 leaves a file in its run directory and stays; member 1 looks for it.
        script_body=(
            'if [ "$ZILEAN_POOL_IDX" = 0 ]; then echo mine > marker-of-run-0; sleep 4\n'
            "else sleep 1; find / -name marker-of-run-0 2>/dev/null; ls marker-of-run-0"
            " 2>/dev/null; echo searched; fi"
        ),
    )
    with script_worker("bash", database_url, **sandboxed(tmp_path)) as worker:
        calls = await run_and_wait(core_app, cast.alice.session, job["id"], worker, count=2)
    by_member = {call["pool_index"]: call for call in calls}
    assert by_member[1]["last_call"]["stdout_snippet"] == "searched\n"


async def test_a_volume_removed_or_lowered_in_the_catalog_fails_the_attempt_unretried(
    core_app: FastAPI, database_url: str, cast: Cast, engine: AsyncEngine, tmp_path: Path
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await make_volume(alice, "reports", "rw")
        await make_volume(alice, "archive", "rw")
        declares = {"volumes": [{"name": "reports", "mode": "rw"}]}
        removed = await create_script_job(
            core_app, cast.alice.session, job_type="bash", name="removed",
            script_body="true", capabilities=declares,
        )  # fmt: skip
        lowered = await create_script_job(
            core_app, cast.alice.session, job_type="bash", name="lowered",
            script_body="true", capabilities={"volumes": [{"name": "archive", "mode": "rw"}]},
        )  # fmt: skip
        lowering = await alice.put("/api/script-volumes/archive", json={"max_mode": "ro"})
        assert lowering.status_code == 200, lowering.text
    async with engine.begin() as conn:  # the API refuses to delete a declared volume
        await conn.execute(delete(script_volumes).where(script_volumes.c.name == "reports"))
    with script_worker("bash", database_url, **sandboxed(tmp_path)) as worker:
        [gone] = await run_and_wait(core_app, cast.alice.session, removed["id"], worker)
        [ro] = await run_and_wait(core_app, cast.alice.session, lowered["id"], worker)
    assert (gone["state"], gone["last_error"]) == (
        "cancelled",
        'script volume "reports" is no longer in the catalog',
    )
    assert (ro["state"], ro["last_error"]) == (
        "cancelled",
        'script volume "archive" is declared rw, but the catalog now allows only ro',
    )


async def test_when_the_sandbox_self_test_fails_scripts_run_unconfined_and_it_is_reported(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "bwrap").write_text("#!/bin/sh\nexit 1\n")
    (broken / "bwrap").chmod(0o755)
    host_file = tmp_path / "visible.txt"
    host_file.write_text("unconfined")
    job = await create_script_job(
        core_app, cast.alice.session, job_type="bash", script_body=f"cat {host_file}"
    )
    env = {**sandboxed(tmp_path), "PATH": f"{broken}:{PLAIN_PATH}"}
    with script_worker("bash", database_url, **env) as worker:
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
        async with client_for(core_app, cast.carol.session) as carol:
            status = (await carol.get("/api/script-workers/status")).json()
    assert call["last_call"]["stdout_snippet"] == "unconfined"
    assert "self-test" in worker.output
    [bash] = [entry for entry in status if entry["queue"] == "scripts-bash"]
    assert bash["sandbox_enforced"] is False


async def test_a_missing_interpreter_cancels_the_attempt_saying_what_to_install(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    job = await create_script_job(
        core_app, cast.alice.session, job_type="groovy", script_body="println 1",
        exec_timeout_ms=10_000,
    )  # fmt: skip
    with script_worker("groovy", database_url, PATH=str(tmp_path)) as worker:  # no groovy
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker)
    assert call["state"] == "cancelled"
    assert call["last_error"].startswith("groovy scripts cannot run on this worker: `groovy`")


async def test_without_the_sandbox_a_volume_declaration_is_warned_about_once_per_process(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await make_volume(alice, "reports", "rw")
    job = await create_script_job(
        core_app,
        cast.alice.session,
        job_type="bash",
        script_body='echo kept > "$ZILEAN_VOLUME_REPORTS/out"',
        capabilities={"volumes": [{"name": "reports", "mode": "ro"}]},
    )
    env = {**sandboxed(tmp_path), "SCRIPT_SANDBOX_ENABLED": "0"}
    with script_worker("bash", database_url, **env) as worker:
        await run_and_wait(core_app, cast.alice.session, job["id"], worker)
        calls = await run_and_wait(core_app, cast.alice.session, job["id"], worker, count=2)
    assert [call["state"] for call in calls] == ["succeeded", "succeeded"]  # ro is advisory
    assert worker.output.count("script.volumes_unenforced") == 1
    assert (Path(env["SCRIPT_VOLUMES_ROOT"]) / "reports" / "out").read_text() == "kept\n"
