"""Loop policy: whether a successful attempt runs again.

After a success, a looping job's response body (a script's stdout) is read at
`loop_response_path`, a gjson path (see `gjson_path.py`). The loop continues only when
that path holds a JSON number greater than zero: `true`, `"5"`, null, objects, arrays, a
missing path and a body that is not JSON all stop it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zilean.execution.gjson_path import InvalidDocument, ResultType, get_path
from zilean.registry.kinds import DEFAULT_LOOP_RESPONSE_PATH

DEFAULT_LOOP_DELAY_MS = 1_000
DEFAULT_LOOP_MAX_ITERATIONS = 50
# The exact line the worker logs when a run reaches loop_max_iterations.
MAX_ITERATIONS_MESSAGE = "loop max iterations hit, stopping"

_SYSTEM_RANDOM = random.SystemRandom()


@dataclass(frozen=True, slots=True)
class LoopDecision:
    """What to do after a successful attempt of a looping job.

    `reason` is `continue`, or why the loop stops: `disabled`, `invalid_json`,
    `path_absent`, `not_a_number`, `not_positive` or `max_iterations` (the caller logs
    MAX_ITERATIONS_MESSAGE; the attempt still succeeded). `value` is the number read at
    the path, when there was one.
    """

    continue_: bool
    delay_ms: int
    value: float | None
    reason: str


def decide_loop(
    *,
    settings: Mapping[str, Any],
    body: str | bytes,
    iteration: int,
    rng: random.Random | None = None,
) -> LoopDecision:
    """Decide whether a looping job runs again after the success of `iteration` (0-based).

    The next iteration is delayed by `loop_delay_ms` plus a uniform whole number of
    milliseconds in [0, `loop_jitter_ms`]. The cap is only consulted when the body asks
    for more work: iteration `loop_max_iterations - 1` is the last one that runs.
    """
    if iteration < 0:
        raise ValueError(f"iteration is 0-based, got {iteration}")
    if not settings.get("loop_enabled"):
        return LoopDecision(continue_=False, delay_ms=0, value=None, reason="disabled")
    path = settings.get("loop_response_path")
    if not isinstance(path, str) or not path:
        path = DEFAULT_LOOP_RESPONSE_PATH
    try:
        result = get_path(body, path)
    except InvalidDocument:
        return LoopDecision(continue_=False, delay_ms=0, value=None, reason="invalid_json")
    if result is None:
        return LoopDecision(continue_=False, delay_ms=0, value=None, reason="path_absent")
    if result.type is not ResultType.NUMBER:
        return LoopDecision(continue_=False, delay_ms=0, value=None, reason="not_a_number")
    number = float(result.raw)
    if not number > 0:
        return LoopDecision(continue_=False, delay_ms=0, value=number, reason="not_positive")
    cap = _setting(settings, "loop_max_iterations", DEFAULT_LOOP_MAX_ITERATIONS)
    if cap <= 0:
        cap = DEFAULT_LOOP_MAX_ITERATIONS
    if iteration + 1 >= cap:
        return LoopDecision(continue_=False, delay_ms=0, value=number, reason="max_iterations")
    delay = max(0, _setting(settings, "loop_delay_ms", DEFAULT_LOOP_DELAY_MS))
    jitter = max(0, _setting(settings, "loop_jitter_ms", 0))
    if jitter:
        delay += (rng or _SYSTEM_RANDOM).randint(0, jitter)
    return LoopDecision(continue_=True, delay_ms=delay, value=number, reason="continue")


def _setting(settings: Mapping[str, Any], name: str, default: int) -> int:
    value = settings.get(name)
    # bool is an int subclass; treat a stray boolean like any other unusable value.
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value
