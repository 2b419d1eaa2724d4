"""The two host checks a script worker runs once, at start-up.

Both results are reported for the life of the process (`monitoring/script_workers.py`):
fixing the host needs a worker restart to show, which the docs tell operators.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import structlog

from zilean.jobkinds.script.process import sandbox_argv

log = structlog.get_logger(__name__)

SELF_TEST_TIMEOUT = 10.0  # seconds


def volumes_root_mounted(root: Path | None) -> bool:
    """Whether `root` can hold volumes: set, a real directory, not `/`, and writable.

    Writability is proved by creating and removing a directory inside it, which catches
    a read-only mount or a root-owned directory that permission bits alone would miss.
    A set but unusable root is logged as a warning naming the path.
    """
    if root is None:
        return False
    if root.resolve() == Path("/"):
        log.warning(
            "script volumes root cannot be /", action="volumes.root_unusable", path=str(root)
        )
        return False
    try:
        is_dir = root.is_dir()
    except OSError:  # e.g. a parent directory this user cannot search
        is_dir = False
    if not is_dir:
        log.warning(
            "script volumes root is missing or not a directory; script volumes will fail closed",
            action="volumes.root_unusable",
            path=str(root),
        )
        return False
    try:
        Path(tempfile.mkdtemp(prefix=".zilean-probe-", dir=root)).rmdir()
    except OSError:
        log.warning(
            "script volumes root is not writable by this process; script volumes will fail "
            "closed (check the directory's owner and mode, and that it is not mounted read-only)",
            action="volumes.root_unusable",
            path=str(root),
            uid=os.getuid(),
        )
        return False
    return True


def sandbox_enforced(enabled: bool, *, path: str | None = None) -> bool:
    """Whether bubblewrap confines scripts here: enabled, installed, and a real run works.

    The sandbox fails open: when enabled but unusable, scripts still run unconfined and
    the worker says so once, here.
    """
    if not enabled:
        return False
    bwrap = shutil.which("bwrap", path=path)
    if bwrap is None:
        log.warning(
            "SCRIPT_SANDBOX_ENABLED is set but bwrap is not installed; scripts run unconfined",
            action="sandbox.unavailable",
        )
        return False
    try:
        with tempfile.TemporaryDirectory(prefix="zilean-self-test-") as run_dir:
            # The very command line a run gets, so passing proves runs can start here.
            true = shutil.which("true", path="/usr/bin:/bin") or "/usr/bin/true"
            argv = sandbox_argv(bwrap, Path(run_dir).resolve(), true, (), {})
            result = subprocess.run(
                [*argv, true], capture_output=True, timeout=SELF_TEST_TIMEOUT, check=False
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning(
            "bwrap self-test could not run; scripts run unconfined",
            action="sandbox.unavailable",
            error=type(exc).__name__,
        )
        return False
    if result.returncode != 0:
        log.warning(
            "bwrap self-test failed; scripts run unconfined (unprivileged user namespaces "
            "may be disabled on this host)",
            action="sandbox.unavailable",
            exit_code=result.returncode,
            stderr=result.stderr.decode(errors="replace")[:300],
        )
        return False
    return True
