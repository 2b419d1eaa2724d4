"""Run one script as a child process and describe how it ended.

Guarantees, on every path (exit, timeout, spawn failure, cancellation of the coroutine):
the body is written to a file of its own (mode 0600, no execute bit) in a fresh 0700
directory, which is removed afterwards; the child gets exactly `ScriptRun.env`, nothing of
the worker's environment; the body and arguments reach the interpreter as written, with
no shell and no substitution, and `ScriptRun.stdin` (a webhook's body) is only stdin. The
child leads a process group of its own and the whole group is killed when the run ends, so
a background grandchild neither outlives the run nor holds the output pipes open.
Non-guarantee: without the sandbox, a grandchild that starts a session of its own
(`setsid`) leaves the group and survives; reading stops `KILL_GUARD_S` after the kill even
if it still holds the pipes.

With `sandbox=True` the child runs under bubblewrap (`sandbox_argv`): its own user, pid,
IPC, UTS and cgroup namespaces and a fresh /proc, the host's network, and a filesystem of
the runtime (read-only), its own directory and its declared volumes, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from zilean.jobkinds.definitions import SCRIPT_PROGRAMS
from zilean.jobkinds.errors import PermanentCallError

log = structlog.get_logger(__name__)

OUTPUT_CAP = 64 * 1024  # bytes of stdout, and of stderr, kept; the rest is counted and dropped
KILL_GUARD_S = 5.0  # seconds to wait, after the kill, for the exit and for the pipes to close
READ_CHUNK = 64 * 1024  # bytes read from a pipe at a time
# A sandboxed run's /tmp is memory: capped, so that five runs at once cannot exhaust the
# host's RAM (unsized, a tmpfs may take half of it). Large files belong in the run
# directory or a volume, which are on disk.
SANDBOX_TMP_BYTES = 256 * 1024 * 1024

# Namespaces and process hygiene for a sandboxed run; the start-up self-test (host.py)
# builds its argv with `sandbox_argv` too, so it proves exactly these work here. The
# network namespace is shared on purpose: scripts may call APIs, and egress is filtered at
# the host. `--cap-drop ALL` only matters when the worker runs as root.
_ISOLATION = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--cap-drop", "ALL",
)  # fmt: skip
# The host's top-level program and library directories, as symlinks (merged /usr) or dirs.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc any script reads: the dynamic loader, name resolution, CA certificates,
# the Debian alternatives (the links behind groovy, java), local time and the user
# database (bash prompts, Java's user.home); then what each runtime adds (the JVM's
# config). Globs, each bound only when it exists.
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "resolv.conf", "hosts", "nsswitch.conf", "gai.conf", "host.conf", "services", "protocols",
    "ssl/certs", "ssl/openssl.cnf", "pki/tls/certs", "pki/ca-trust",
    "alternatives", "localtime", "passwd", "group",
    *dict.fromkeys(path for program in SCRIPT_PROGRAMS.values() for path in program.etc),
)  # fmt: skip


@dataclass(frozen=True)
class VolumeMount:
    """A declared volume: its catalog name and the real directory that holds it."""

    name: str
    host_path: Path  # an existing real directory directly under SCRIPT_VOLUMES_ROOT
    read_only: bool


@dataclass(frozen=True)
class ScriptRun:
    """Everything one run needs; the caller has already resolved the job and its variables."""

    command: Sequence[str]  # the interpreter's argv before the file, e.g. ("python3", "-I")
    extension: str  # the runtime's file extension, e.g. ".sh"
    body: str
    args: Sequence[str]
    env: Mapping[str, str]  # the complete environment; nothing else is added
    timeout_ms: int
    volumes: Sequence[VolumeMount] = ()
    sandbox: bool = False  # only when enabled and the start-up self-test passed
    work_root: Path | None = None  # where the per-run directory goes; None: the temp dir
    stdin: bytes = b""  # what the script reads on stdin (a webhook's body); empty: /dev/null


@dataclass(frozen=True)
class ScriptOutcome:
    """How a run ended. `exit_code` is None when it timed out; a signal is 128 + its number."""

    exit_code: int | None
    timed_out: bool
    stdout: bytes  # at most OUTPUT_CAP bytes
    stdout_length: int  # the full length the script wrote
    stderr: bytes
    stderr_length: int
    duration_ms: int


async def run_script(run: ScriptRun) -> ScriptOutcome:
    """Run `run` once and return how it ended; a non-zero exit is an outcome, not an error.

    Raise `PermanentCallError` when the interpreter (or bwrap) cannot be found or started:
    that is the worker's configuration, which no retry fixes.
    """
    run_dir, argv = _prepare(run)
    try:
        return await _supervise(argv, run, run_dir)
    finally:
        _remove_tree(run_dir)


def _prepare(run: ScriptRun) -> tuple[Path, list[str]]:
    """Find the programs, write the body into a fresh run directory; return it and the argv.

    Blocking, but only a directory and one small file: cheaper than a thread hop.
    """
    if not run.command:
        raise PermanentCallError("no script interpreter is configured")
    interpreter = _find_program(
        run.command[0], run.env.get("PATH", os.defpath), "script interpreter"
    )
    bwrap = None
    if run.sandbox:  # bwrap is the worker's program: found on the worker's own PATH
        bwrap = _find_program("bwrap", os.environ.get("PATH", os.defpath), "sandbox")
    run_dir = Path(tempfile.mkdtemp(prefix="zilean-run-", dir=run.work_root)).resolve()
    try:
        script = run_dir / f"script{run.extension}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(script, flags, 0o600), "w", encoding="utf-8", newline="") as file:
            file.write(run.body)
    except BaseException:
        _remove_tree(run_dir)
        raise
    argv = [interpreter, *run.command[1:], str(script), *run.args]
    if bwrap is not None:
        argv = [*sandbox_argv(bwrap, run_dir, interpreter, run.volumes, run.env), *argv]
    return run_dir, argv


def sandbox_argv(
    bwrap: str,
    run_dir: Path,
    interpreter: str,
    volumes: Sequence[VolumeMount],
    env: Mapping[str, str],
) -> list[str]:
    """Return the bwrap command line that goes before the interpreter's argv.

    The sandbox's root is an empty tmpfs, made read-only once everything is mounted; a
    private tmpfs on /tmp, capped at `SANDBOX_TMP_BYTES` of memory, takes the scratch
    writes and is discarded with the run. The run
    directory is bound after that tmpfs, at its own path, so it stays visible when it lives
    under /tmp while no other run's directory does. The environment is not on this command
    line (it would show in the process list): the caller passes it to bwrap, and `env`
    removes the PWD that bwrap always sets, so the script gets exactly `env`.
    """
    argv = [bwrap, *_ISOLATION, "--ro-bind", "/usr", "/usr"]
    for top in map(Path, _SYSTEM_DIRS):
        if top.is_symlink():
            argv += ["--symlink", str(top.readlink()), str(top)]
        elif top.is_dir():
            argv += ["--ro-bind", str(top), str(top)]
    for pattern in _ETC:
        for entry in sorted(Path("/etc").glob(pattern)):
            argv += ["--ro-bind", str(entry), str(entry)]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(SANDBOX_TMP_BYTES)]
    argv += ["--tmpfs", "/tmp"]  # noqa: S108 - private to the run
    for tree in _runtime_trees(interpreter):
        argv += ["--ro-bind", str(tree), str(tree)]
    argv += ["--bind", str(run_dir), str(run_dir)]
    for volume in volumes:
        path = str(volume.host_path)
        argv += ["--ro-bind" if volume.read_only else "--bind", path, path]
    keep_pwd = ["-u", "PWD"] if "PWD" not in env else [f"PWD={env['PWD']}"]
    env_program = shutil.which("env", path="/usr/bin:/bin") or "/usr/bin/env"
    return [*argv, "--remount-ro", "/", "--chdir", str(run_dir), "--", env_program, *keep_pwd]


def _runtime_trees(interpreter: str) -> list[Path]:
    """Return the directories outside /usr the interpreter needs: its install prefix.

    For both the path found on PATH and the file it resolves to, that is the directory
    above its `bin` (a venv, a pyenv version, node_modules above `.bin`), or else the
    directory holding it; never `/`, which would expose the whole host.
    """
    trees: list[Path] = []
    for path in (Path(interpreter), Path(os.path.realpath(interpreter))):
        if _is_system(path):
            continue
        tree = path.parent.parent if path.parent.name in ("bin", ".bin") else path.parent
        if tree == Path("/"):
            tree = path
        if not any(tree.is_relative_to(known) for known in trees):
            trees = [known for known in trees if not known.is_relative_to(tree)] + [tree]
    return trees


def _is_system(path: Path) -> bool:
    return any(path.is_relative_to(top) for top in ("/usr", *_SYSTEM_DIRS))


def _find_program(name: str, search_path: str, what: str) -> str:
    found = shutil.which(name, path=search_path)
    if found is None:
        raise PermanentCallError(f"{what} not found: {name}")
    return str(Path(found).absolute())  # not resolved: a venv's python must keep its path


class _Output:
    """One output pipe, read whenever it is readable: the head kept, the rest counted.

    Reading is a plain callback on the event loop, so the child never blocks on a full
    pipe and nothing here can be interrupted half-way by a cancellation.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fd, self.write_end = os.pipe()
        self.kept = bytearray()
        self.length = 0
        self.closed: asyncio.Future[None] = loop.create_future()
        os.set_blocking(self._fd, False)
        loop.add_reader(self._fd, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self._fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # every writer is gone
            self._stop()
            return
        self.length += len(data)
        room = OUTPUT_CAP - len(self.kept)
        if room > 0:
            self.kept += data[:room]

    def _stop(self) -> None:
        self._loop.remove_reader(self._fd)
        if not self.closed.done():
            self.closed.set_result(None)

    def close_write_end(self) -> None:
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop()
        self.close_write_end()
        os.close(self._fd)


class _Exit:
    """Resolve `exited` when the child ends, and reap it, through a pidfd (Linux 5.3+).

    Our own watch rather than asyncio's subprocess transport, whose wait cannot always be
    cancelled while the process is starting. A run that ends before its (killed) child
    does leaves the watch in place, so the child is still reaped when it goes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, child: subprocess.Popen[bytes]) -> None:
        self._loop = loop
        self._child = child
        self._fd = os.pidfd_open(child.pid)
        self.exited: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._fd, self._ended)

    def _ended(self) -> None:
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._child.poll()
        if not self.exited.done():
            self.exited.set_result(None)


async def _supervise(argv: list[str], run: ScriptRun, run_dir: Path) -> ScriptOutcome:
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        stdout = stack.enter_context(_Output(loop))
        stderr = stack.enter_context(_Output(loop))
        stdin = stack.enter_context(_stdin_file(run.stdin, run_dir))
        try:
            child = _spawn(argv, run.env, run_dir, stdin, stdout.write_end, stderr.write_end)
        finally:
            stdout.close_write_end()  # the child holds its own copies
            stderr.close_write_end()
        # Last in, first out: on every way out (cancellation too) the group dies first.
        stack.callback(_kill_group, child.pid)
        exit_watch = _Exit(loop, child)
        done, _ = await asyncio.wait({exit_watch.exited}, timeout=run.timeout_ms / 1000)
        timed_out = not done  # decided first: the kill below ends it with a signal
        # Kill the group also after a normal exit: what the script left running in the
        # background ends with it, as it does in the sandbox's pid namespace.
        _kill_group(child.pid)
        ends = {exit_watch.exited, stdout.closed, stderr.closed}
        await asyncio.wait(ends, timeout=KILL_GUARD_S)
    returncode = child.returncode
    if timed_out or returncode is None:
        exit_code = None
    else:
        exit_code = 128 - returncode if returncode < 0 else returncode  # as the shell says
    return ScriptOutcome(
        exit_code=exit_code,
        timed_out=timed_out,
        stdout=bytes(stdout.kept),
        stdout_length=stdout.length,
        stderr=bytes(stderr.kept),
        stderr_length=stderr.length,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


@contextlib.contextmanager
def _stdin_file(data: bytes, run_dir: Path) -> Iterator[int]:
    """Yield the descriptor the child reads as stdin: `data` in a nameless file, or /dev/null.

    A file rather than a pipe, so a script that never reads its input cannot stall the
    worker on a full pipe; unlinked from the start (`TemporaryFile`), so no path to it
    shows in the run directory. Blocking, but at most the webhook body cap (256 KiB).
    """
    if not data:
        with Path(os.devnull).open("rb") as devnull:
            yield devnull.fileno()
        return
    with tempfile.TemporaryFile(dir=run_dir) as file:
        file.write(data)
        file.flush()
        file.seek(0)
        yield file.fileno()


def _spawn(
    argv: list[str], env: Mapping[str, str], cwd: Path, stdin: int, stdout: int, stderr: int
) -> subprocess.Popen[bytes]:
    """Start the child as the leader of a new session (and so of its own process group).

    Blocking for the fork and exec only, as asyncio's own subprocess support is.
    """
    try:
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise PermanentCallError(
            f"script interpreter could not be started: {argv[0]}: {exc.strerror or exc}"
        ) from exc


def _kill_group(group: int) -> None:
    # The group's id is the leader's pid, which the kernel does not hand out again while
    # any member lives; once the group is empty this is a harmless ESRCH.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _remove_tree(run_dir: Path) -> None:
    """Remove the run's directory even where the script took its own rights away (chmod)."""
    with contextlib.suppress(OSError):
        run_dir.chmod(0o700)
    for directory, subdirectories, _ in os.walk(run_dir):
        for name in subdirectories:
            path = Path(directory, name)
            if not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.chmod(0o700)
    shutil.rmtree(run_dir, ignore_errors=True)
    if run_dir.exists():
        log.warning(
            "a script's run directory could not be removed",
            action="script.cleanup_failed",
            path=str(run_dir),
        )
