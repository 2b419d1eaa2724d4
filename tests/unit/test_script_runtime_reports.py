"""Which script runtimes `zilean up` starts on a machine, and what it says about the rest.

Each case builds a PATH holding links to some of this machine's real programs, so the
lookups are the real ones; the pinned tsx is pointed at the case's own directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from zilean.jobkinds.definitions import SCRIPT_PROGRAMS
from zilean.jobkinds.script import runtimes
from zilean.jobkinds.script.runtimes import CHECKOUT_RUNTIMES, resolve
from zilean.registry.kinds import JobType
from zilean.services.up import child_specs

# The checkout's own, kept before a test points the module's directory elsewhere.
CHECKOUT_TSX = CHECKOUT_RUNTIMES / SCRIPT_PROGRAMS[JobType.TYPESCRIPT].pinned


def machine_program(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        reason = f"`{name}` is not installed here"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (.ci/run installs every runtime)")
        pytest.skip(reason)
    return found


def path_with(directory: Path, *names: str) -> str:
    """Return a PATH of one directory linking to this machine's `names`."""
    directory.mkdir()
    for name in names:
        (directory / name).symlink_to(machine_program(name))
    return str(directory)


def script_worker_runtimes(env: dict[str, str]) -> list[str]:
    specs = [spec for spec in child_specs(env) if spec.label == "script-worker"]
    if not specs:
        return []
    argv = specs[0].argv
    return [argv[i + 1] for i, part in enumerate(argv) if part == "--runtime"]


@pytest.fixture
def no_pinned_tsx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtimes, "CHECKOUT_RUNTIMES", tmp_path / "no-checkout")


@pytest.mark.usefixtures("no_pinned_tsx")
def test_up_starts_only_the_installed_runtimes_and_says_why_the_others_are_not(
    tmp_path: Path,
) -> None:
    env = {"PATH": path_with(tmp_path / "bin", "bash", "python3")}
    with capture_logs() as logs:
        started = script_worker_runtimes(env)
    assert started == ["bash", "python"]
    warnings = {log["runtime"]: log["event"] for log in logs if log["log_level"] == "warning"}
    assert warnings == {
        "node": "node script worker not started: `node` not found on PATH "
        "(on Debian: apt-get install nodejs); needs tsx: run "
        "`npm ci --prefix runtimes/node --ignore-scripts` in the checkout, or put `tsx` on PATH",
        "groovy": "groovy script worker not started: `groovy` not found on PATH "
        "(on Debian: apt-get install --no-install-recommends groovy); `java` not found on "
        "PATH (on Debian: apt-get install default-jre-headless)",
    }


@pytest.mark.usefixtures("no_pinned_tsx")
def test_node_without_tsx_still_runs_javascript_and_says_typescript_will_not(
    tmp_path: Path,
) -> None:
    env = {"PATH": path_with(tmp_path / "bin", "node")}
    with capture_logs() as logs:
        started = script_worker_runtimes(env)
    assert started == ["node"]
    node = [log for log in logs if log.get("runtime") == "node"]
    assert [(log["job_type"], log["event"]) for log in node] == [
        (
            "typescript",
            "typescript scripts will not run: needs tsx: run "
            "`npm ci --prefix runtimes/node --ignore-scripts` in the checkout, "
            "or put `tsx` on PATH",
        )
    ]


def test_groovy_without_java_is_not_started(tmp_path: Path) -> None:
    env = {"PATH": path_with(tmp_path / "bin", "groovy")}
    with capture_logs() as logs:
        started = script_worker_runtimes(env)
    assert "groovy" not in started
    [groovy] = [log["event"] for log in logs if log.get("runtime") == "groovy"]
    assert groovy == (
        "groovy script worker not started: `java` not found on PATH "
        "(on Debian: apt-get install default-jre-headless)"
    )
    # A JAVA_HOME holding a java is enough: Groovy's launcher uses it.
    java_home = Path(machine_program("java")).resolve().parent.parent
    with_home = resolve(JobType.GROOVY, {**env, "JAVA_HOME": str(java_home)})
    assert with_home.available
    assert with_home.environment["JAVA_HOME"] == str(java_home)


@pytest.mark.usefixtures("no_pinned_tsx")
def test_a_tsx_on_path_stands_in_for_the_pinned_one(tmp_path: Path) -> None:
    if not CHECKOUT_TSX.exists():
        pytest.skip("the pinned tsx is not installed: npm ci --prefix runtimes/node")
    env = {"PATH": path_with(tmp_path / "bin", "node")}
    (tmp_path / "bin" / "tsx").symlink_to(CHECKOUT_TSX.resolve())
    interpreter = resolve(JobType.TYPESCRIPT, env)
    assert interpreter.available
    assert interpreter.argv == ("tsx",)


def test_nothing_installed_starts_no_script_worker(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with capture_logs() as logs:
        assert script_worker_runtimes({"PATH": str(empty)}) == []
    assert {log["runtime"] for log in logs} == {"bash", "node", "groovy", "python"}
