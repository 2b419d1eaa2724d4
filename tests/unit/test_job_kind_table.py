"""Adding a runtime is one module: the job kind table, which everything else reads.

The first test reads the source: outside `jobkinds/definitions.py`, no module of Zilean
names a particular job type, runtime, queue or service label of a script runtime, so
none would need an edit for a new one. The others check that what is derived from the
table (queues, services, the enums the API publishes) covers every row.
"""

from __future__ import annotations

import ast
from pathlib import Path

import zilean
from zilean.config import Service, script_worker_service
from zilean.execution.queues import RUNTIME_QUEUES, SERVICE_QUEUES, Queue
from zilean.jobkinds.definitions import (
    JOB_KINDS,
    SCRIPT_KINDS,
    SCRIPT_PROGRAMS,
    JobType,
    ScriptRuntime,
    kinds_run_by,
)
from zilean.jobkinds.script.runtimes import resolve
from zilean.monitoring.samples import SERVICES

SOURCE = Path(zilean.__file__).parent
TABLE = SOURCE / "jobkinds" / "definitions.py"
ENUMS = {"JobType", "ScriptRuntime", "Service", "Queue"}
SCRIPT_MEMBERS = {member.name for member in ScriptRuntime} | {
    kind.job_type.name for kind in SCRIPT_KINDS.values()
}


def _kind_names() -> set[str]:
    """Every spelling of a script runtime or script job type the code could hard-wire."""
    names = {str(job_type) for job_type in SCRIPT_KINDS}
    for runtime in ScriptRuntime:
        names |= {runtime.value, runtime.queue_name, runtime.service_name}
    names |= {program.name for program in SCRIPT_PROGRAMS.values()}
    return names


def _mentions(path: Path, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in names:
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ENUMS
            and (node.attr in SCRIPT_MEMBERS or node.attr.startswith(("SCRIPT_", "SCRIPTS_")))
        ):
            found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_module_but_the_table_names_a_script_runtime() -> None:
    names = _kind_names()
    modules = [
        path
        for path in sorted(SOURCE.rglob("*.py"))
        if path != TABLE and "migrations" not in path.parts
    ]
    assert len(modules) > 100  # the scan reads the real package
    mentions = [mention for path in modules for mention in _mentions(path, names)]
    assert mentions == []


def test_the_scan_finds_a_hard_wired_runtime(tmp_path: Path) -> None:
    module = SOURCE / "jobkinds" / "script" / "process.py"
    assert _mentions(TABLE, _kind_names())  # the table itself names every one
    assert _mentions(module, _kind_names()) == []
    planted = tmp_path / "planted.py"
    planted.write_text(module.read_text() + '\nQUEUE = Queue.SCRIPTS_GROOVY\nPROGRAM = "python3"\n')
    assert [m.split(" ", 1)[1] for m in _mentions(planted, _kind_names())] == [
        "Queue.SCRIPTS_GROOVY",
        "'python3'",
    ]


def test_every_runtime_has_a_queue_a_service_and_its_kinds() -> None:
    for runtime in ScriptRuntime:
        queue = RUNTIME_QUEUES[runtime]
        assert str(queue) == runtime.queue_name
        assert SERVICE_QUEUES[script_worker_service(runtime)] == {queue}
        assert script_worker_service(runtime) in SERVICES  # health lists it
        assert script_worker_service(runtime).is_script_worker
        assert kinds_run_by(runtime), f"{runtime} runs no job type"
    assert set(Queue) == {Queue.DEFAULT, *RUNTIME_QUEUES.values()}
    assert {s for s in Service if s.is_script_worker} == {
        script_worker_service(r) for r in ScriptRuntime
    }


def test_every_job_type_has_a_kind_and_every_script_kind_an_interpreter() -> None:
    assert set(JOB_KINDS) == set(JobType)
    for job_type, kind in SCRIPT_KINDS.items():
        assert kind.extension.startswith(".")
        assert resolve(job_type).kind is kind
