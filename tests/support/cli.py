"""Run the real `zilean` CLI as a subprocess and watch its output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def base_environment(**overrides: str) -> dict[str, str]:
    """A clean environment: only what a process needs, none of the caller's Zilean settings."""
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "TMPDIR"}}
    env.update(overrides)
    return env


def run_cli(
    args: list[str], env: Mapping[str, str], *, stdin: str = "", timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zilean", *args],
        env=dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class RunningProcess:
    """A CLI process whose stdout and stderr are collected line by line as they arrive."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._pump, args=(stream,), daemon=True)
            for stream in (process.stdout, process.stderr)
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, stream: object) -> None:
        assert hasattr(stream, "readline")
        for line in iter(stream.readline, ""):
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self._lines)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait until the output matches `pattern`; fail early if the process exits."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        with self._changed:
            while True:
                match = regex.search("".join(self._lines))
                if match:
                    return match
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.process.poll() is not None:
                    raise AssertionError(
                        f"{pattern!r} not seen (exit code {self.process.poll()}); output:\n"
                        + "".join(self._lines)
                    )
                self._changed.wait(timeout=min(remaining, 0.2))

    def stop(self, sig: int = signal.SIGINT, timeout: float = 40.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.close(timeout)

    def close(self, timeout: float = 40.0) -> int:
        """Wait for the process to exit, drain its output and release the pipes."""
        code = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return code


def wait_for_text(path: Path, pattern: str, timeout: float = 60.0) -> re.Match[str]:
    """Wait until the file at `path` (a log file, say) matches `pattern`."""
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern)
    while True:
        text = path.read_text() if path.exists() else ""
        match = regex.search(text)
        if match:
            return match
        if time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} not seen in {path}; it holds:\n{text}")
        time.sleep(0.1)


@contextmanager
def spawn_cli(
    args: list[str], env: Mapping[str, str], cwd: Path | None = None
) -> Iterator[RunningProcess]:
    process = subprocess.Popen(
        [sys.executable, "-m", "zilean", *args],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = RunningProcess(process)
    try:
        yield running
    finally:
        if process.poll() is None:
            process.kill()
        running.close()
