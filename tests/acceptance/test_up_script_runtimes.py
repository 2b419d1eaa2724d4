"""`zilean up` on a machine with only some interpreters, and with a bad sandbox switch."""

from __future__ import annotations

import shutil
from pathlib import Path

import psutil
import pytest

from tests.support.cli import base_environment, run_cli, spawn_cli, wait_for_text
from tests.support.servers import free_port

pytestmark = pytest.mark.acceptance

READY = r"Zilean is ready at (http://127\.0\.0\.1:\d+)"


def bin_with(directory: Path, *names: str) -> str:
    """Return a PATH of one directory linking to this machine's `names` (bash, python3)."""
    directory.mkdir()
    for name in names:
        found = shutil.which(name)
        assert found is not None, f"{name} is part of every machine this runs on"
        (directory / name).symlink_to(found)
    return str(directory)


def test_up_runs_the_installed_runtimes_and_warns_about_the_rest_in_the_terminal(
    tmp_path: Path, database_url: str
) -> None:
    data_dir = tmp_path / "data"
    env = base_environment(DATABASE_URL=database_url, TZ="UTC")
    env["PATH"] = bin_with(tmp_path / "bin", "bash", "python3")
    args = ["up", "--data-dir", str(data_dir), "--port", str(free_port())]
    with spawn_cli(args, env) as up:
        up.wait_for(READY)
        # The checkout's tsx stays, so only node itself is reported missing for Node.
        up.wait_for(r"node script worker not started: `node` not found on PATH")
        up.wait_for(r"groovy script worker not started: `groovy` not found on PATH")
        for queue in ("scripts-bash", "scripts-python"):
            wait_for_text(data_dir / "zilean.log", rf'"queues": \["{queue}"\]')
        workers = [
            child.cmdline()
            for child in psutil.Process(up.process.pid).children()
            if "script-worker" in child.cmdline()
        ]
        assert [argv[argv.index("script-worker") :] for argv in workers] == [
            ["script-worker", "--runtime", "bash", "--runtime", "python"]
        ]
        assert up.stop() == 0
    assert "bash script worker" not in up.output
    assert "python script worker" not in up.output


@pytest.mark.parametrize("value", ["true", '"1"', "yes", "2"])
def test_up_refuses_a_sandbox_switch_other_than_one_or_zero(tmp_path: Path, value: str) -> None:
    # Nothing listens on port 1: the refusal comes before any connection.
    env = base_environment(
        DATABASE_URL="postgres://zilean:changeme@127.0.0.1:1/zilean",
        SCRIPT_SANDBOX_ENABLED=value,
    )
    args = ["up", "--data-dir", str(tmp_path / "data"), "--port", str(free_port())]
    result = run_cli(args, env)
    assert result.returncode != 0
    assert f"SCRIPT_SANDBOX_ENABLED must be 1 (on), 0 or empty (off) (got {value!r})" in (
        result.stderr
    )
    assert "ready" not in result.stdout
