"""Child processes the suite starts, and the guarantee that none outlives it.

Every child runs in its own session (a terminal's Ctrl-C reaches only the suite, which
then stops children in order) and asks the kernel for SIGTERM should the suite die
without cleaning up (PR_SET_PDEATHSIG). `Processes.stop_all` runs on every exit path:
normal end, error, Ctrl-C and SIGTERM. Each child writes its output to a log file in
the run's work directory, kept for diagnosis.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil

from benchmarks.harness import BenchError, wait_until

STOP_TIMEOUT = 30.0  # seconds a child gets after SIGTERM (a worker's soft stop is 25 s)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ManagedProcess:
    """One child: its process, its log file, and every descendant seen while it ran."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._log_handle = log.open("wb")
        # Popen from the main thread only: PDEATHSIG fires when the forking *thread* exits.
        self.popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._descendants: dict[int, psutil.Process] = {}

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def process(self) -> psutil.Process:
        return psutil.Process(self.pid)

    def children(self) -> list[psutil.Process]:
        """Return the live descendants, remembering them so `stop` can reap stragglers."""
        try:
            found = self.process().children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in found:
            self._descendants[child.pid] = child
        return found

    async def wait_for_output(self, pattern: str, *, within: float) -> re.Match[str]:
        """Wait until the log matches `pattern`; fail at once if the process exits."""
        regex = re.compile(pattern)
        found: list[re.Match[str]] = []

        async def seen() -> bool:
            match = regex.search(self.output())
            if match:
                found.append(match)
                return True
            if not self.alive():
                raise BenchError(
                    f"{self.name} exited with {self.popen.returncode} before printing "
                    f"{pattern!r}:\n{self.tail()}"
                )
            return False

        await wait_until(seen, within=within, what=f"{self.name} to print {pattern!r}")
        return found[0]

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM the child, SIGKILL it after `timeout`, then any descendant left behind."""
        self.children()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        for child in self._descendants.values():
            with contextlib.suppress(psutil.Error):
                if child.is_running():
                    child.terminate()
                    child.wait(timeout=timeout)
        for child in self._descendants.values():
            with contextlib.suppress(psutil.Error):
                if child.is_running():
                    child.kill()
        self._log_handle.close()
        return self.popen.returncode


class Processes:
    """Every child of one run; `stop_all` stops them newest first."""

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._running: list[ManagedProcess] = []
        self._numbers = 0

    def spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> ManagedProcess:
        self._numbers += 1
        log = self._logs / f"{self._numbers:02d}-{name}.log"
        process = ManagedProcess(name, argv, env, log)
        self._running.append(process)
        return process

    def stop(self, process: ManagedProcess, timeout: float = STOP_TIMEOUT) -> int | None:
        if process in self._running:
            self._running.remove(process)
        return process.stop(timeout)

    def stop_all(self) -> None:
        while self._running:
            self._running.pop().stop()

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Stop, on leaving the block, every process spawned inside it (newest first)."""
        before = list(self._running)
        try:
            yield
        finally:
            for process in reversed([p for p in self._running if p not in before]):
                self.stop(process)


async def stop_soon(processes: Processes, process: ManagedProcess) -> int | None:
    """Stop `process` without blocking the event loop during its soft stop."""
    return await asyncio.to_thread(processes.stop, process)
