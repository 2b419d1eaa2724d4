"""Child processes for `zilean up`: start them, restart them when they die, stop them cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
from dataclasses import dataclass, field

import structlog

from zilean.services.signals import SOFT_STOP

log = structlog.get_logger(__name__)

STOP_TIMEOUT = SOFT_STOP + 5.0  # seconds before a child that ignores SIGTERM is killed
RESTART_BACKOFF_MAX = 30.0  # seconds
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM the child if `zilean up` itself dies without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ChildSpec:
    label: str  # what the logs call the child: a service label, or "script-worker"
    argv: list[str]
    env: dict[str, str]


@dataclass
class _Child:
    spec: ChildSpec
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Supervisor:
    """Keep each child running until `stop()`; a crash is logged and the child restarted."""

    def __init__(self, specs: list[ChildSpec]) -> None:
        self._children = [_Child(spec) for spec in specs]
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        for child in self._children:
            child.task = asyncio.create_task(self._keep_running(child))

    async def _spawn(self, child: _Child) -> asyncio.subprocess.Process:
        # A new session keeps the terminal's Ctrl-C away from children: we stop them ourselves,
        # in order, after the HTTP side has drained.
        process = await asyncio.create_subprocess_exec(
            *child.spec.argv,
            env=child.spec.env,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.info(
            "child started",
            action="up.child_started",
            child=child.spec.label,
            pid=process.pid,
        )
        return process

    async def _keep_running(self, child: _Child) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            child.process = await self._spawn(child)
            code = await child.process.wait()
            if self._stopping.is_set():
                return
            child.restarts += 1
            log.error(
                "child exited; restarting",
                action="up.child_exited",
                child=child.spec.label,
                exit_code=code,
                restart_in_seconds=backoff,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=backoff)
            backoff = min(backoff * 2, RESTART_BACKOFF_MAX)

    async def stop(self) -> None:
        """SIGTERM every child, wait for its soft stop, then SIGKILL what is left."""
        self._stopping.set()
        running = [c.process for c in self._children if c.process and c.process.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                await asyncio.wait_for(process.wait(), timeout=STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for child in self._children:
            if child.task is not None:
                child.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await child.task
