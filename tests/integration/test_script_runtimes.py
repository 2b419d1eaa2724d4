"""The interpreter resolver against the real interpreters of this machine.

Each installed runtime runs a one-line script the way a script worker does: a 0600 file
with the job type's extension, an environment built from scratch, the arguments as given.
A runtime that is not installed is skipped here with the reason, and fails under CI,
whose `.ci/run` installs every one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from zilean.jobkinds.definitions import GROOVY_NO_GRAPE, SCRIPT_KINDS, SCRIPT_PROGRAMS
from zilean.jobkinds.script.host import sandbox_enforced
from zilean.jobkinds.script.process import ScriptRun
from zilean.jobkinds.script.process import run_script as run_in_process
from zilean.jobkinds.script.runtimes import CHECKOUT_RUNTIMES, Interpreter, resolve
from zilean.registry.kinds import JobType

NODE_RUNTIME_DIR = CHECKOUT_RUNTIMES / "node"
PINNED_TSX = CHECKOUT_RUNTIMES / SCRIPT_PROGRAMS[JobType.TYPESCRIPT].pinned
REAL_PYTHON_DIR = Path(sys.executable).resolve().parent  # not a version manager's shim
RUN_TIMEOUT = 60.0  # seconds; a cold JVM takes a few
ARGS = ["one", "two words", "$HOME", "--flag"]
# Each prints its arguments joined by "|"; typescript's annotation makes it TypeScript.
PRINT_ARGS = {
    JobType.BASH: 'IFS="|"; echo "$*"',
    JobType.JAVASCRIPT: 'console.log(process.argv.slice(2).join("|"))',
    JobType.TYPESCRIPT: 'const args: string[] = process.argv.slice(2); console.log(args.join("|"))',
    JobType.GROOVY: 'println args.join("|")',
    JobType.PYTHON: 'import sys; print("|".join(sys.argv[1:]))',
}


def installed(job_type: JobType) -> Interpreter:
    """Resolve `job_type`; skip when it is not installed here, or fail under CI."""
    interpreter = resolve(job_type)
    if not interpreter.available:
        reason = f"{job_type} is not installed here: " + "; ".join(interpreter.missing)
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (.ci/run installs every runtime)")
        pytest.skip(reason)
    return interpreter


def run_script(
    interpreter: Interpreter,
    directory: Path,
    body: str,
    args: list[str] | tuple[str, ...] = (),
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run `body` as a worker would: a 0600 temp file and only PATH plus the interpreter's
    own variables in the environment (extra `env` wins, to test its precedence)."""
    script = directory / f"script{interpreter.kind.extension}"
    script.write_text(body + "\n")
    script.chmod(0o600)
    return subprocess.run(
        interpreter.command(script, args),
        env={"PATH": os.environ["PATH"], **interpreter.environment, **env},
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("job_type", list(SCRIPT_KINDS))
def test_each_installed_interpreter_runs_a_script_with_its_arguments_as_given(
    job_type: JobType, tmp_path: Path
) -> None:
    interpreter = installed(job_type)
    result = run_script(interpreter, tmp_path, PRINT_ARGS[job_type], ARGS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "|".join(ARGS)  # "$HOME" reached it unexpanded


def test_typescript_runs_the_pinned_tsx_of_the_checkout() -> None:
    interpreter = installed(JobType.TYPESCRIPT)
    if not PINNED_TSX.exists() and not os.environ.get("CI"):
        pytest.skip("the pinned tsx is not installed: npm ci --prefix runtimes/node")
    assert interpreter.argv == (str(PINNED_TSX),)
    pinned = json.loads((NODE_RUNTIME_DIR / "package.json").read_text())["dependencies"]["tsx"]
    version = subprocess.run(
        [*interpreter.argv, "--version"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    )
    assert f"tsx v{pinned}" in version.stdout
    lock = json.loads((NODE_RUNTIME_DIR / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/tsx"]["version"] == pinned


def test_python_runs_isolated_from_pythonpath_and_the_scripts_directory(tmp_path: Path) -> None:
    interpreter = installed(JobType.PYTHON)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for directory in (tmp_path, elsewhere):  # beside the script, and on PYTHONPATH
        (directory / f"shadow_{directory.name}.py").write_text("")
    body = (
        "import importlib.util, sys\n"
        f"print(sys.flags.isolated, [importlib.util.find_spec(n) is not None for n in "
        f"('shadow_{tmp_path.name}', 'shadow_elsewhere')])"
    )
    result = run_script(interpreter, tmp_path, body, PYTHONPATH=str(elsewhere))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 [False, False]"


def test_groovy_gets_its_java_home_and_heap_ceiling() -> None:
    interpreter = installed(JobType.GROOVY)
    assert interpreter.kind.min_exec_timeout_ms == 10_000
    assert (Path(interpreter.environment["JAVA_HOME"]) / "bin" / "java").is_file()
    assert "-XX:MaxRAMPercentage=" in interpreter.environment["JAVA_OPTS"]


def local_grape_repository(root: Path, java_home: str) -> Path:
    """Build a Maven repository holding `zileantest:greeter:1.0`, and the Ivy settings
    that make Grape resolve from it alone; return the settings file.

    `groovyc` runs on the Java the runtime found: Debian's script otherwise looks only
    in `/usr/lib/jvm/default-java`, which a machine whose Java did not come from
    `default-jre-headless` lacks."""
    sources, classes = root / "src" / "zileantest", root / "classes"
    sources.mkdir(parents=True)
    (sources / "Greeter.groovy").write_text(
        'package zileantest\nclass Greeter { static String hello() { "hello from a grape" } }\n'
    )
    groovyc = shutil.which("groovyc")
    assert groovyc is not None, "Debian's groovy package ships groovyc"
    subprocess.run(
        [groovyc, "-d", str(classes), str(sources / "Greeter.groovy")],
        env={**os.environ, "JAVA_HOME": java_home},
        capture_output=True,
        timeout=RUN_TIMEOUT,
        check=True,
    )
    artifact = root / "repo" / "zileantest" / "greeter" / "1.0"
    artifact.mkdir(parents=True)
    with zipfile.ZipFile(artifact / "greeter-1.0.jar", "w") as jar:
        for compiled in classes.rglob("*.class"):
            jar.write(compiled, compiled.relative_to(classes))
    (artifact / "greeter-1.0.pom").write_text(
        "<project><modelVersion>4.0.0</modelVersion><groupId>zileantest</groupId>"
        "<artifactId>greeter</artifactId><version>1.0</version></project>"
    )
    settings = root / "ivysettings.xml"
    settings.write_text(
        '<ivysettings><settings defaultResolver="downloadGrapes"/><resolvers>'
        f'<ibiblio name="downloadGrapes" root="{(root / "repo").as_uri()}/" m2compatible="true"/>'
        "</resolvers></ivysettings>"
    )
    return settings


def test_groovy_refuses_grab_even_when_java_opts_ask_for_grape(tmp_path: Path) -> None:
    interpreter = installed(JobType.GROOVY)
    assert GROOVY_NO_GRAPE in interpreter.argv
    settings = local_grape_repository(
        tmp_path / "grapes-source", interpreter.environment["JAVA_HOME"]
    )
    cache = tmp_path / "grape-cache"
    java_opts = f"-Dgrape.root={cache} -Dgrape.config={settings}"
    body = "@Grab('zileantest:greeter:1.0')\nimport zileantest.Greeter\nprintln Greeter.hello()"
    # Control: the same groovy, without the resolver's options, does resolve the grab.
    plain = Interpreter(interpreter.kind, ("groovy",), environment=interpreter.environment)
    grabbed = run_script(plain, tmp_path, body, JAVA_OPTS=java_opts)
    assert grabbed.stdout.strip() == "hello from a grape", grabbed.stderr
    shutil.rmtree(cache)

    refused = run_script(
        interpreter, tmp_path, body, JAVA_OPTS=f"{java_opts} -Dgroovy.grape.enable=true"
    )
    assert refused.returncode != 0
    assert "unable to resolve class zileantest.Greeter" in refused.stderr
    assert "hello from a grape" not in refused.stdout
    assert not cache.exists()  # Grape never ran: nothing was resolved or cached


@pytest.mark.parametrize("job_type", list(SCRIPT_KINDS))
async def test_each_installed_interpreter_runs_under_the_sandbox(
    job_type: JobType, tmp_path: Path
) -> None:
    """Each runtime finds what it needs (its libraries, /etc entries, Java) inside bwrap.

    The interpreters are looked up on a PATH with the real python first: a version
    manager's shim (pyenv's) is a script that runs files the sandbox does not bind.
    """
    installed(job_type)
    path = f"{REAL_PYTHON_DIR}:{os.environ['PATH']}"
    interpreter = resolve(job_type, {**os.environ, "PATH": path})
    if not sandbox_enforced(True):
        pytest.skip("bwrap cannot create user namespaces on this host (self-test failed)")
    work_root = (tmp_path / "runs").resolve()
    work_root.mkdir()
    outcome = await run_in_process(
        ScriptRun(
            command=interpreter.argv,
            extension=interpreter.kind.extension,
            body=PRINT_ARGS[job_type],
            args=ARGS,
            env={"PATH": path, **interpreter.environment},
            timeout_ms=int(RUN_TIMEOUT * 1000),
            sandbox=True,
            work_root=work_root,
        )
    )
    assert outcome.exit_code == 0, outcome.stderr.decode()
    assert outcome.stdout.decode().strip() == "|".join(ARGS)
