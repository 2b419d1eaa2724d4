"""One script process: real interpreters, real process groups, the real bubblewrap.

Most tests run twice, unconfined and in the sandbox, since a script must behave the same
in both; the sandbox-only tests prove what it hides, each against the unconfined run
that does see it, so none of them could pass with the sandbox silently off.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from tests.support.monitoring import eventually
from zilean.jobkinds.errors import PermanentCallError
from zilean.jobkinds.script.host import sandbox_enforced
from zilean.jobkinds.script.process import (
    KILL_GUARD_S,
    OUTPUT_CAP,
    SANDBOX_TMP_BYTES,
    ScriptOutcome,
    ScriptRun,
    VolumeMount,
    run_script,
)

PYTHON = (sys.executable, "-I")  # a venv's python: its tree lies outside /usr
# The trees the sandbox binds for that python: the venv's, and its base interpreter's.
PYTHON_TREES = {Path(sys.executable).parent.parent, Path(sys.executable).resolve().parent.parent}
ENV = {"PATH": "/usr/bin:/bin"}
MARGIN = 1.5  # seconds a killed run may take past its timeout on a busy 2-core machine
WORKTREE = Path(__file__).resolve().parents[2]
INSTALL_BWRAP = (
    "bwrap is not on PATH: install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) "
    "so the sandbox tests can run"
)


@pytest.fixture(scope="module")
def bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        pytest.fail(INSTALL_BWRAP)
    return sandbox_enforced(True)


@pytest.fixture(params=[False, True], ids=["unconfined", "sandboxed"])
def sandbox(request: pytest.FixtureRequest, bwrap_works: bool) -> bool:
    """Both ways of running; the sandboxed one only where bwrap can make namespaces."""
    if request.param and not bwrap_works:
        pytest.skip("bwrap cannot create user namespaces on this host (self-test failed)")
    return bool(request.param)


@pytest.fixture
def sandboxed(bwrap_works: bool) -> None:
    if not bwrap_works:
        pytest.skip("bwrap cannot create user namespaces on this host (self-test failed)")


@pytest.fixture
def work_root(tmp_path: Path) -> Iterator[Path]:
    """Where run directories go; every test ends with it empty again."""
    root = (tmp_path / "runs").resolve()
    root.mkdir()
    yield root
    assert leftovers(root) == [], "a run directory was left behind"


def leftovers(root: Path) -> list[str]:
    return sorted(entry.name for entry in root.iterdir())


def exists(path: str | Path) -> bool:
    return Path(path).exists()


def python(body: str, work_root: Path, sandbox: bool, **fields: Any) -> ScriptRun:
    fields = {"args": (), "env": ENV, "timeout_ms": 10_000, **fields}
    return ScriptRun(
        command=PYTHON, extension=".py", body=body, sandbox=sandbox, work_root=work_root, **fields
    )


def bash(body: str, work_root: Path, sandbox: bool, **fields: Any) -> ScriptRun:
    fields = {"args": (), "env": ENV, "timeout_ms": 10_000, **fields}
    return ScriptRun(
        command=("bash",), extension=".sh", body=body, sandbox=sandbox, work_root=work_root,
        **fields,
    )  # fmt: skip


def report(outcome: ScriptOutcome) -> Any:
    """The JSON a test script printed on its last line of stdout."""
    assert outcome.exit_code == 0, outcome
    return json.loads(outcome.stdout.decode().splitlines()[-1])


def sleep_seconds() -> str:
    """A `sleep` argument unique to this test, to find that process from the host by."""
    return f"300.{time.monotonic_ns() % 10**9}"


def processes_running(argument: str) -> list[int]:
    """Host pids of live processes whose argv contains `argument` (zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in argv:
            found.append(int(entry.name))
    return found


async def appears(argument: str) -> list[int]:
    async def check() -> list[int]:
        return processes_running(argument)

    return await eventually(check, within=10.0, what=f"a process running sleep {argument}")


async def vanishes(argument: str) -> None:
    async def check() -> bool:
        return not processes_running(argument)

    await eventually(check, within=5.0, what=f"no process running sleep {argument}")


# --- how a run ends ----------------------------------------------------------------------


async def test_exit_zero_and_its_output(work_root: Path, sandbox: bool) -> None:
    outcome = await run_script(bash("echo hello; echo note >&2", work_root, sandbox))
    assert (outcome.exit_code, outcome.timed_out) == (0, False)
    assert (outcome.stdout, outcome.stderr) == (b"hello\n", b"note\n")
    assert (outcome.stdout_length, outcome.stderr_length) == (6, 5)
    assert outcome.duration_ms >= 0


async def test_a_non_zero_exit_keeps_its_code_and_stderr(work_root: Path, sandbox: bool) -> None:
    body = "echo partial; echo 'it broke' >&2; exit 3"
    outcome = await run_script(bash(body, work_root, sandbox))
    assert (outcome.exit_code, outcome.timed_out) == (3, False)
    assert (outcome.stdout, outcome.stderr) == (b"partial\n", b"it broke\n")


async def test_death_by_signal_is_128_plus_the_signal(work_root: Path, sandbox: bool) -> None:
    outcome = await run_script(bash("kill -TERM $$", work_root, sandbox))
    assert (outcome.exit_code, outcome.timed_out) == (128 + signal.SIGTERM, False)


# --- what the script receives ------------------------------------------------------------


ARGS = ("--verbose", "two words", "{{x}}", "", "$HOME", "'quoted'", "a;b|c", "ünï")


async def test_args_arrive_exactly_as_written(work_root: Path, sandbox: bool) -> None:
    seen = report(
        await run_script(
            python("import sys, json; print(json.dumps(sys.argv[1:]))", work_root, sandbox,
                   args=ARGS)
        )
    )  # fmt: skip
    assert seen == list(ARGS)
    outcome = await run_script(
        bash('for a in "$@"; do printf "[%s]" "$a"; done', work_root, sandbox, args=ARGS)
    )
    assert outcome.stdout.decode() == "".join(f"[{arg}]" for arg in ARGS)


async def test_stdin_is_the_given_bytes_unseen_in_the_directory_else_empty(
    work_root: Path, sandbox: bool
) -> None:
    # More than a pipe holds, and never read by the first script: neither may stall.
    data = b'{"text": "$(touch x) `id`"}\n' + b" " * (200 * 1024)
    body = (
        "import json, os, sys, hashlib\n"
        "raw = sys.stdin.buffer.read()\n"
        "print(json.dumps({'sha': hashlib.sha256(raw).hexdigest(), 'listing': os.listdir('.')}))"
    )
    seen = report(await run_script(python(body, work_root, sandbox, stdin=data)))
    assert seen == {"sha": hashlib.sha256(data).hexdigest(), "listing": ["script.py"]}
    ignoring = await run_script(bash("echo done", work_root, sandbox, stdin=data))
    assert (ignoring.exit_code, ignoring.stdout) == (0, b"done\n")
    empty = await run_script(bash("wc -c", work_root, sandbox))
    assert empty.stdout.decode().strip() == "0"


async def test_the_environment_is_exactly_the_one_given(
    work_root: Path, sandbox: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://zilean:secret@db/zilean")
    monkeypatch.setenv("SCRIPT_SECRETS_KEY", "not-for-scripts")
    env = {
        "PATH": "/usr/bin:/bin",
        "ZILEAN_JOB_NAME": "nightly report",
        "ZILEAN_POOL_IDX": "0",
        "GLOBALVAR_GREETING": "a=b c",
        "GLOBALVAR_EMPTY": "",
        "GLOBALVAR_UNICODE": "héllo",
    }
    # /proc/self/environ is what exec received: Python itself adds LC_CTYPE to os.environ.
    body = (
        "import json; raw = open('/proc/self/environ', 'rb').read().split(b'\\0')[:-1]; "
        "print(json.dumps(dict(e.decode().split('=', 1) for e in raw)))"
    )
    assert report(await run_script(python(body, work_root, sandbox, env=env))) == env


async def test_the_body_is_a_private_file_in_a_fresh_directory(
    work_root: Path, sandbox: bool
) -> None:
    body = (
        "import json, os, stat\n"
        "mode = lambda p: oct(stat.S_IMODE(os.stat(p).st_mode))\n"
        "print(json.dumps({'file': __file__, 'body': open(__file__, encoding='utf-8').read(),\n"
        "    'cwd': os.getcwd(), 'file_mode': mode(__file__), 'dir_mode': mode('.'),\n"
        "    'listing': os.listdir('.')}))\n"
        "# {{not_a_variable}} kept as written, ünïcode, trailing spaces and no newline   "
    )
    seen = report(await run_script(python(body, work_root, sandbox)))
    assert seen["body"] == body
    assert (seen["file_mode"], seen["dir_mode"]) == ("0o600", "0o700")
    assert Path(seen["file"]).parent == Path(seen["cwd"])
    assert Path(seen["cwd"]).parent == work_root
    assert seen["listing"] == ["script.py"]
    assert not exists(seen["cwd"])


async def test_each_run_gets_a_directory_of_its_own(work_root: Path, sandbox: bool) -> None:
    body = "import os; print(os.getcwd())"
    first, second = await asyncio.gather(
        run_script(python(body, work_root, sandbox)), run_script(python(body, work_root, sandbox))
    )
    assert first.stdout != second.stdout


# --- output ------------------------------------------------------------------------------


async def test_output_beyond_the_cap_is_counted_and_dropped(work_root: Path, sandbox: bool) -> None:
    body = (
        "import sys\n"
        "sys.stdout.buffer.write(bytes(range(256)) * 8192)\n"  # 2 MiB, every byte value
        "sys.stderr.buffer.write(b'e' * 100_000)\n"
    )
    outcome = await run_script(python(body, work_root, sandbox))
    assert outcome.exit_code == 0
    assert outcome.stdout == (bytes(range(256)) * 8192)[:OUTPUT_CAP]
    assert outcome.stdout_length == 256 * 8192
    assert (outcome.stderr, outcome.stderr_length) == (b"e" * OUTPUT_CAP, 100_000)


# --- timeouts and the process group ------------------------------------------------------


async def test_a_timeout_kills_the_whole_group(work_root: Path, sandbox: bool) -> None:
    seconds = sleep_seconds()
    run = bash(f"sleep {seconds} & echo started; sleep 600", work_root, sandbox, timeout_ms=1000)
    started = time.monotonic()
    task = asyncio.create_task(run_script(run))
    await appears(seconds)  # the background grandchild is really running
    outcome = await task
    elapsed = time.monotonic() - started
    assert (outcome.exit_code, outcome.timed_out) == (None, True)
    assert outcome.stdout == b"started\n"
    assert elapsed < 1.0 + MARGIN, elapsed  # the grandchild did not hold the pipes open
    await vanishes(seconds)


async def test_what_a_script_leaves_running_ends_with_it(work_root: Path, sandbox: bool) -> None:
    seconds = sleep_seconds()
    run = bash(f"sleep {seconds} &\nwhile ! kill -0 $! 2>/dev/null; do :; done\necho left",
               work_root, sandbox)  # fmt: skip
    started = time.monotonic()
    outcome = await run_script(run)
    assert (outcome.exit_code, outcome.stdout) == (0, b"left\n")
    assert time.monotonic() - started < MARGIN
    await vanishes(seconds)


async def test_a_grandchild_that_leaves_the_group_is_outwaited_by_the_guard(
    work_root: Path,
) -> None:
    """Unconfined, `setsid` escapes the group kill: reading stops after the guard."""
    seconds = sleep_seconds()
    run = bash(f"setsid sleep {seconds} & sleep 600", work_root, False, timeout_ms=300)
    started = time.monotonic()
    try:
        outcome = await run_script(run)
        elapsed = time.monotonic() - started
        assert (outcome.exit_code, outcome.timed_out) == (None, True)
        assert KILL_GUARD_S <= elapsed < 0.3 + KILL_GUARD_S + MARGIN, elapsed
        assert processes_running(seconds)  # the documented non-guarantee
    finally:
        for pid in processes_running(seconds):  # the escapee this test started
            os.kill(pid, signal.SIGKILL)


async def test_the_sandbox_leaves_no_escape_from_the_kill(work_root: Path, sandboxed: None) -> None:
    seconds = sleep_seconds()
    run = bash(f"setsid sleep {seconds} & sleep 600", work_root, True, timeout_ms=1000)
    started = time.monotonic()
    task = asyncio.create_task(run_script(run))
    await appears(seconds)
    outcome = await task
    assert outcome.timed_out
    assert time.monotonic() - started < 1.0 + MARGIN
    await vanishes(seconds)


async def test_cancelling_the_coroutine_kills_the_group_and_cleans_up(
    work_root: Path, sandbox: bool
) -> None:
    seconds = sleep_seconds()
    task = asyncio.create_task(run_script(bash(f"sleep {seconds}", work_root, sandbox)))
    await appears(seconds)
    assert len(leftovers(work_root)) == 1  # the run's directory exists while it runs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert leftovers(work_root) == []
    await vanishes(seconds)


async def test_cancelling_at_once_still_kills_what_started(work_root: Path, sandbox: bool) -> None:
    seconds = sleep_seconds()
    task = asyncio.create_task(run_script(bash(f"sleep {seconds}", work_root, sandbox)))
    await asyncio.sleep(0)  # the task runs up to its first wait: the child exists by then
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert leftovers(work_root) == []
    await vanishes(seconds)


def test_the_workers_event_loop_runs_scripts_the_same_way(work_root: Path, sandbox: bool) -> None:
    """The workers run uvloop; its subprocess transport must keep the same guarantees."""
    seconds = sleep_seconds()

    async def timed_out_run() -> tuple[ScriptOutcome, float]:
        body = f"sleep {seconds} & head -c 100000 /dev/zero; echo oops >&2; sleep 600"
        started = time.monotonic()
        outcome = await run_script(bash(body, work_root, sandbox, timeout_ms=1000))
        elapsed = time.monotonic() - started
        await vanishes(seconds)
        return outcome, elapsed

    outcome, elapsed = uvloop.run(timed_out_run())
    assert (outcome.exit_code, outcome.timed_out) == (None, True)
    assert (outcome.stdout, outcome.stdout_length) == (bytes(OUTPUT_CAP), 100_000)
    assert outcome.stderr == b"oops\n"
    assert elapsed < 1.0 + MARGIN


# --- an interpreter that cannot start ----------------------------------------------------


async def test_a_missing_interpreter_is_a_permanent_error(work_root: Path, sandbox: bool) -> None:
    run = ScriptRun(command=("no-such-runtime",), extension=".sh", body="true", args=(),
                    env=ENV, timeout_ms=1000, sandbox=sandbox, work_root=work_root)  # fmt: skip
    with pytest.raises(PermanentCallError, match="no-such-runtime") as raised:
        await run_script(run)
    assert raised.value.permanent


async def test_an_interpreter_that_cannot_execute_is_a_permanent_error(
    work_root: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "bin" / "runtime"
    broken.parent.mkdir()
    broken.write_bytes(b"\x00\x01 not a program")
    broken.chmod(0o755)
    run = ScriptRun(command=(str(broken),), extension=".sh", body="true", args=(), env=ENV,
                    timeout_ms=1000, work_root=work_root)  # fmt: skip
    with pytest.raises(PermanentCallError, match="could not be started"):
        await run_script(run)
    # the work_root fixture checks the run directory, made before the spawn, is gone


CLEANUP_WITHOUT_PRIVILEGES = """
import asyncio, json, sys
from pathlib import Path
from zilean.jobkinds.script.process import ScriptRun, run_script
root = Path(sys.argv[1])
body = "mkdir -p locked/inner && touch locked/inner/f && chmod 500 locked/inner locked . && echo ok"
run = ScriptRun(command=("bash",), extension=".sh", body=body, args=(),
                env={"PATH": "/usr/bin:/bin"}, timeout_ms=10_000, work_root=root)
outcome = asyncio.run(run_script(run))
print(json.dumps([outcome.stdout.decode(), [p.name for p in root.iterdir()]]))
"""


def test_a_script_that_locks_its_directory_still_has_it_removed(work_root: Path) -> None:
    """Run by a child without capabilities, as root is not bound by mode bits."""
    result = subprocess.run(
        ["bwrap", "--unshare-user", "--cap-drop", "ALL", "--dev-bind", "/", "/",
         sys.executable, "-c", CLEANUP_WITHOUT_PRIVILEGES, str(work_root)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["ok\n", []]


# --- node, when it is installed ----------------------------------------------------------


async def test_node_runs_a_javascript_file(work_root: Path, sandbox: bool) -> None:
    if shutil.which("node", path=ENV["PATH"]) is None:
        pytest.skip("node is not installed")
    run = ScriptRun(command=("node",), extension=".js", args=("a b", "{{x}}"), env=ENV,
                    body="console.log(JSON.stringify(process.argv.slice(2)))",
                    timeout_ms=10_000, sandbox=sandbox, work_root=work_root)  # fmt: skip
    assert report(await run_script(run)) == ["a b", "{{x}}"]


# --- what the sandbox hides --------------------------------------------------------------


@pytest.fixture
def volumes_root(tmp_path: Path) -> Path:
    root = tmp_path / "volumes"
    for name in ("reports", "archive", "undeclared"):
        (root / name).mkdir(parents=True)
    (root / "archive" / "old.txt").write_text("kept\n")
    (root / "undeclared" / "private.txt").write_text("not yours\n")
    return root


# The start of a script that reports whether it may write where it tries to.
ATTEMPT_WRITE = """
import json, os
def attempt(path):
    try:
        with open(path, "w") as f:
            f.write("written\\n")
        return "ok"
    except OSError as exc:
        return exc.strerror
"""
VOLUME_SCRIPT = (
    ATTEMPT_WRITE
    + """
reports, archive = os.environ["ZILEAN_VOLUME_REPORTS"], os.environ["ZILEAN_VOLUME_ARCHIVE"]
print(json.dumps({
    "rw": attempt(os.path.join(reports, "today.txt")),
    "ro": attempt(os.path.join(archive, "new.txt")),
    "read": open(os.path.join(archive, "old.txt")).read(),
    "siblings": sorted(os.listdir(os.path.dirname(reports))),
}))
"""
)


async def test_volumes_are_mounted_as_declared(
    work_root: Path, volumes_root: Path, sandbox: bool
) -> None:
    volumes = (
        VolumeMount("reports", volumes_root / "reports", read_only=False),
        VolumeMount("archive", volumes_root / "archive", read_only=True),
    )
    env = {**ENV, **{f"ZILEAN_VOLUME_{v.name.upper()}": str(v.host_path) for v in volumes}}
    seen = report(
        await run_script(python(VOLUME_SCRIPT, work_root, sandbox, env=env, volumes=volumes))
    )
    assert (seen["rw"], seen["read"]) == ("ok", "kept\n")
    assert (volumes_root / "reports" / "today.txt").read_text() == "written\n"
    if sandbox:
        assert seen["ro"] == "Read-only file system"
        assert not (volumes_root / "archive" / "new.txt").exists()
        assert seen["siblings"] == ["archive", "reports"]  # neither the root nor the rest
    else:  # without the sandbox `ro` is advisory and every volume is reachable
        assert seen["ro"] == "ok"
        assert seen["siblings"] == ["archive", "reports", "undeclared"]


PROBE_PATHS = """
import json, os, sys
def state(path):
    try:
        os.stat(path)
        return "visible"
    except OSError as exc:
        return exc.strerror
print(json.dumps({path: state(path) for path in sys.argv[1:]}))
"""


async def test_the_hosts_other_files_are_not_visible(work_root: Path, sandbox: bool) -> None:
    elsewhere = Path(tempfile.mkdtemp(prefix="zilean-test-elsewhere-"))
    try:
        secret = elsewhere / "secret.txt"
        secret.write_text("host file\n")
        candidates = [secret, WORKTREE / "pyproject.toml", WORKTREE / "src", Path("/root/.bashrc"),
                      Path("/etc/hostname"), Path("/etc/shadow"), Path("/var/log")]  # fmt: skip
        paths = [str(path) for path in candidates if path.exists()]
        assert len(paths) >= 4
        seen = report(await run_script(python(PROBE_PATHS, work_root, sandbox, args=paths)))
    finally:
        shutil.rmtree(elsewhere)
    expected = "No such file or directory" if sandbox else "visible"
    assert seen == dict.fromkeys(paths, expected)


WRITE_OUTSIDE = (
    ATTEMPT_WRITE
    + """
print(json.dumps({"scratch": attempt("/tmp/scratch.txt"), "cwd": attempt("out.txt"),
                  "usr": attempt("/usr/zilean-test"), "root": attempt("/zilean-test"),
                  "tmp": sorted(os.listdir("/tmp"))}))
"""
)


async def test_sandboxed_writes_land_only_in_scratch_and_the_run_directory(
    work_root: Path, sandboxed: None
) -> None:
    seen = report(await run_script(python(WRITE_OUTSIDE, work_root, True)))
    assert (seen["scratch"], seen["cwd"]) == ("ok", "ok")
    assert seen["usr"] == seen["root"] == "Read-only file system"
    assert not exists("/tmp/scratch.txt")  # a private /tmp, gone with the run
    # /tmp holds the scratch file and the path down to the run directory, nothing else
    # but the interpreter's own tree when it lives under /tmp (a checkout there, as in CI)
    interpreter = {tree.parts[2] for tree in PYTHON_TREES if tree.parts[1:2] == ("tmp",)}
    assert seen["tmp"] == sorted({"scratch.txt", work_root.parts[2], *interpreter})


TMP_SIZE = """
import json, os
st = os.statvfs("/tmp")
print(json.dumps({"tmp_bytes": st.f_blocks * st.f_frsize}))
"""


async def test_the_sandboxs_tmp_is_capped(work_root: Path, sandboxed: None) -> None:
    seen = report(await run_script(python(TMP_SIZE, work_root, True)))
    assert seen["tmp_bytes"] == SANDBOX_TMP_BYTES


CONCURRENT_FIRST = """
import os, sys, time
with open(os.path.join(sys.argv[1], "where"), "w") as f:
    f.write(os.getcwd())
deadline = time.monotonic() + 30
while not os.path.exists(os.path.join(sys.argv[1], "done")) and time.monotonic() < deadline:
    time.sleep(0.02)
"""


async def test_a_concurrent_run_cannot_see_the_first_runs_directory(
    work_root: Path, volumes_root: Path, sandbox: bool
) -> None:
    shared = volumes_root / "reports"
    volumes = (VolumeMount("reports", shared, read_only=False),)
    first = asyncio.create_task(
        run_script(python(CONCURRENT_FIRST, work_root, sandbox, args=(str(shared),),
                          volumes=volumes))
    )  # fmt: skip
    try:

        async def first_dir() -> str | None:
            where = shared / "where"
            return where.read_text() if where.exists() else None

        path = await eventually(first_dir, what="the first run reporting its directory")
        assert exists(path)  # it is there on the host while the first run lives
        seen = report(await run_script(python(PROBE_PATHS, work_root, sandbox, args=(path,))))
    finally:
        (shared / "done").touch()
        assert (await first).exit_code == 0
    assert seen == {path: "No such file or directory" if sandbox else "visible"}


async def test_proc_shows_only_the_sandboxs_processes(work_root: Path, sandbox: bool) -> None:
    body = (
        "import json, os; "
        "print(json.dumps(sorted(int(p) for p in os.listdir('/proc') if p.isdigit())))"
    )
    pids = report(await run_script(python(body, work_root, sandbox)))
    assert (os.getpid() in pids) is not sandbox
    if sandbox:
        assert pids == [1, 2]  # bwrap's init and the script itself


async def test_the_sandbox_keeps_the_network(work_root: Path, sandboxed: None) -> None:
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await received.put(await reader.readline())
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    body = f"import socket; socket.create_connection(('127.0.0.1', {port})).sendall(b'hi\\n')"
    async with server:
        outcome = await run_script(python(body, work_root, True))
        assert outcome.exit_code == 0, outcome.stderr
        assert await asyncio.wait_for(received.get(), 5) == b"hi\n"
