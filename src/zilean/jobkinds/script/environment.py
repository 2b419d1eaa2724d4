"""A script's environment, built from scratch: exactly what the docs promise, no more.

Nothing of the worker's own environment reaches a script except `PATH` (and `TZ` when
the worker has one): the worker holds the database URL and the script key, and a
script is operator code that could print either. Global variables arrive as
`GLOBALVAR_<NAME>`; a secret one only when it is opted in on both sides (see
`caller.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

GLOBALVAR_PREFIX = "GLOBALVAR_"
VOLUME_PREFIX = "ZILEAN_VOLUME_"
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")


def globalvar_name(name: str) -> str | None:
    """`GLOBALVAR_` plus the name upper-cased, each run of other characters one `_`.

    A name that is empty, only separators, not ASCII, or starts with a digit is left out
    rather than mangled into something the operator did not write.
    """
    if not name.isascii() or not name or name[0].isdigit():
        return None
    mapped = _SEPARATORS.sub("_", name).upper()
    if not mapped.strip("_"):
        return None
    return GLOBALVAR_PREFIX + mapped


def script_environment(
    *,
    path: str,
    job_name: str,
    pool_index: int,
    loop_iteration: int,
    timezone: str | None,
    volumes: Mapping[str, Path],
    variables: Sequence[tuple[str, str]],
    runtime: Mapping[str, str],
    webhook: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one run.

    `variables` are (global variable name, value) pairs, secrets already filtered to the
    opted-in ones; `runtime` what the interpreter itself needs (Groovy's `JAVA_HOME`);
    `webhook` the `ZILEAN_WEBHOOK_*` metadata of a webhook-triggered run.
    Injected names always win over a variable's; two variables that map to one name are
    both left out, and logged, rather than one silently chosen.
    """
    injected = {
        "PATH": path,
        "ZILEAN_JOB_NAME": job_name,
        "ZILEAN_POOL_IDX": str(pool_index),
        "ZILEAN_LOOP_ITERATION": str(loop_iteration),
        **({"TZ": timezone} if timezone else {}),
        **{VOLUME_PREFIX + name.upper(): str(host) for name, host in volumes.items()},
        **runtime,
        **(webhook or {}),
    }
    by_name: dict[str, list[str]] = {}
    values: dict[str, str] = {}
    for name, value in variables:
        mapped = globalvar_name(name)
        if mapped is None:
            log.warning(
                "global variable left out of a script's environment: its name cannot be "
                "an environment variable",
                action="script.variable_skipped",
                variable=name,
            )
            continue
        by_name.setdefault(mapped, []).append(name)
        values[mapped] = value
    environment = dict(injected)
    for mapped, names in sorted(by_name.items()):
        if len(names) > 1:
            log.warning(
                "global variables left out of a script's environment: their names map "
                "to the same environment variable",
                action="script.variables_collide",
                environment_name=mapped,
                variables=sorted(names),
            )
        elif mapped in injected:
            log.warning(
                "global variable left out of a script's environment: Zilean sets that name",
                action="script.variable_shadowed",
                environment_name=mapped,
            )
        else:
            environment[mapped] = values[mapped]
    return environment
