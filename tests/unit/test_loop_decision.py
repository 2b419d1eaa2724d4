"""Loop decisions, and the gjson paths they read.

Every case of tests/data/conformance/gjson-paths.json runs through `get_path`. The
conformance README allows gjson-py to differ on the integer-overflow quirks; this
evaluator reads numbers from the document's text rather than through Python ints, so
those cases match too and none is skipped.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from zilean.execution.gjson_path import InvalidDocument, ResultType, get_path
from zilean.execution.loop import MAX_ITERATIONS_MESSAGE, LoopDecision, decide_loop

VECTORS = Path(__file__).parents[1] / "data" / "conformance" / "gjson-paths.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]
CASE_IDS = [f"{number}-{case['name']}-{case['path']}" for number, case in enumerate(CASES)]


def loop_row(**overrides: Any) -> dict[str, Any]:
    """A looping job's settings, with the registry's defaults."""
    return {
        "loop_enabled": True,
        "loop_response_path": "result.remaining",
        "loop_delay_ms": 1000,
        "loop_jitter_ms": 0,
        "loop_max_iterations": 50,
        **overrides,
    }


def remaining(value: str) -> str:
    return '{"result": {"remaining": ' + value + "}}"


class NoRandom(random.Random):
    """Fails the test if a decision draws a random number."""

    def randint(self, a: int, b: int) -> int:
        raise AssertionError("no jitter was configured, so nothing should be drawn")


def test_every_vector_is_present() -> None:
    assert len(CASES) == 80


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gjson_conformance(case: dict[str, Any]) -> None:
    result = get_path(case["json"], case["path"])
    if case["type"] == "absent":
        assert result is None
        return
    assert result is not None
    assert str(result.type) == case["type"]
    assert result.raw == case["raw"]
    if result.type is ResultType.NUMBER:
        assert isinstance(result.value, float)
        assert result.value == case["value"]
        assert math.copysign(1, result.value) == math.copysign(1, case["value"])  # -0
    else:
        # type() too: in Python True == 1, and a boolean must not pass for a number.
        assert type(result.value) is type(case["value"])
        assert result.value == case["value"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_loop_continues_on_a_vector_only_for_a_positive_number(
    case: dict[str, Any],
) -> None:
    settings = loop_row(loop_response_path=case["path"])
    decision = decide_loop(settings=settings, body=case["json"], iteration=0)
    positive = case["type"] == "Number" and case["value"] > 0
    assert decision.continue_ is positive


# Beyond the vectors: pipes and truthiness queries as gjson's SYNTAX.md and tests state them.
README_DOC = """{
  "children": ["Sara","Alex","Jack"],
  "friends": [
    {"first": "Dale", "last": "Murphy", "age": 44},
    {"first": "Roger", "last": "Craig", "age": 68},
    {"first": "Jane", "last": "Murphy", "age": 47}
  ]
}"""
TRUTHY_DOC = json.dumps(
    {
        "vals": [
            {"a": 1, "b": True},
            {"a": 2, "b": True},
            {"a": 3, "b": False},
            {"a": 4, "b": "0"},
            {"a": 5, "b": 0},
            {"a": 6, "b": "1"},
            {"a": 7, "b": 1},
            {"a": 8, "b": "true"},
            {"a": 9, "b": False},
            {"a": 10, "b": None},
            {"a": 11},
        ]
    }
)


@pytest.mark.parametrize(
    ("document", "path", "raw"),
    [
        (README_DOC, "friends|0.first", '"Dale"'),
        (README_DOC, "friends.0|first", '"Dale"'),
        (README_DOC, "friends|0|first", '"Dale"'),
        (README_DOC, "friends|#", "3"),
        # after a query or projection, `.` works per element and `|` on the whole result
        (README_DOC, 'friends.#(last="Murphy")#|first', None),
        (README_DOC, 'friends.#(last="Murphy")#.0', "[]"),
        (
            README_DOC,
            'friends.#(last="Murphy")#|0',
            '{"first": "Dale", "last": "Murphy", "age": 44}',
        ),
        (README_DOC, 'friends.#(last="Murphy")#.#', "[]"),
        (README_DOC, 'friends.#(last="Murphy")#|#', "2"),
        (README_DOC, "friends.#.age|1", "68"),
        (README_DOC, 'children.#(!%"*a*")', '"Alex"'),
        (README_DOC, 'children.#(%"*a*")#', '["Sara","Jack"]'),
        (README_DOC, 'friends.#(first!%"D*").last', '"Craig"'),
        # a missing key never matches, whatever the operator
        (README_DOC, "friends.#(nick!=x)#", "[]"),
        (TRUTHY_DOC, "vals.#(b==~true)#.a", "[1,2,6,7,8]"),
        (TRUTHY_DOC, "vals.#(b==~false)#.a", "[3,4,5,9,10,11]"),  # missing counts as false
        (TRUTHY_DOC, "vals.#(b==~null)#.a", "[10,11]"),
        (TRUTHY_DOC, "vals.#(b!=~*)#.a", "[11]"),
        # duplicate keys: the first one whose value has the rest of the path wins
        ('{"a": {"b": 1}, "a": {"c": 2}}', "a.c", "2"),
        ('{"a": {"b": 1}, "a": {"c": 2}}', "a.b", "1"),
        # a query-all over an empty array yields nothing rather than []
        ('{"items": []}', "items.#(a>1)#", None),
        ('{"items": []}', "items.#", "0"),
        # a bare scalar document has no paths
        ("5", "0", None),
        ("5", "", None),
    ],
)
def test_paths_beyond_the_vectors(document: str, path: str, raw: str | None) -> None:
    result = get_path(document, path)
    assert (None if result is None else result.raw) == raw


@pytest.mark.parametrize(
    "document",
    [
        "",
        "   ",
        "not json",
        "{",
        '{"result": {"remaining": 5}',
        '{"result": {"remaining": 5}} trailing',
        '{"a": NaN}',
        '{"a": Infinity}',
        "[1,]",
        "{'a': 1}",
        "[" * 100_000 + "]" * 100_000,  # deeper than Python's decoder goes
        b"\xff\xfe",
    ],
)
def test_malformed_documents_are_refused(document: str | bytes) -> None:
    with pytest.raises(InvalidDocument):
        get_path(document, "a")


@pytest.mark.parametrize(
    ("body", "continue_", "value", "reason"),
    [
        # a positive number continues
        (remaining("42"), True, 42.0, "continue"),
        (remaining("2.5"), True, 2.5, "continue"),
        (remaining("1e-9"), True, 1e-9, "continue"),
        (remaining("5E+2"), True, 500.0, "continue"),
        (remaining("1" * 5000), True, math.inf, "continue"),  # beyond int() and float range
        # zero and negatives stop
        (remaining("0"), False, 0.0, "not_positive"),
        (remaining("-0"), False, -0.0, "not_positive"),
        (remaining("0.0"), False, 0.0, "not_positive"),
        (remaining("-3"), False, -3.0, "not_positive"),
        # anything that is not a JSON number stops, however number-like
        (remaining("true"), False, None, "not_a_number"),
        (remaining("false"), False, None, "not_a_number"),
        (remaining('"5"'), False, None, "not_a_number"),
        (remaining("null"), False, None, "not_a_number"),
        (remaining('{"count": 5}'), False, None, "not_a_number"),
        (remaining("[5]"), False, None, "not_a_number"),
        # a missing path stops
        ('{"result": {}}', False, None, "path_absent"),
        ('{"result": 5}', False, None, "path_absent"),
        ("{}", False, None, "path_absent"),
        ("7", False, None, "path_absent"),  # a bare number has no `result.remaining`
        # a body that is not JSON stops
        ("", False, None, "invalid_json"),
        ("OK", False, None, "invalid_json"),
        ('{"result": {"remaining": 5}', False, None, "invalid_json"),
        ('{"result": {"remaining": NaN}}', False, None, "invalid_json"),
        ('{"result": {"remaining": 5}}\nDone', False, None, "invalid_json"),
        # bytes and script stdout work the same way
        (remaining("3").encode(), True, 3.0, "continue"),
        (b"\xef\xbb\xbf" + remaining("3").encode(), True, 3.0, "continue"),  # a UTF-8 BOM
        (remaining("3") + "\n", True, 3.0, "continue"),
        (b'{"result": {"remaining": "\xff"}}', False, None, "invalid_json"),
    ],
)
def test_the_loop_continues_only_on_a_strictly_positive_number(
    body: str | bytes, continue_: bool, value: float | None, reason: str
) -> None:
    decision = decide_loop(settings=loop_row(), body=body, iteration=0, rng=NoRandom())
    assert decision.continue_ is continue_
    assert decision.reason == reason
    assert decision.delay_ms == (1000 if continue_ else 0)
    if value is None:
        assert decision.value is None
    else:
        assert decision.value == value
        assert type(decision.value) is float


@pytest.mark.parametrize(
    ("path", "body", "continue_"),
    [
        ("data.items.#", '{"data": {"items": [1, 2, 3]}}', True),
        ("data.items.#", '{"data": {"items": []}}', False),
        ("queue.0.depth", '{"queue": [{"depth": 9}, {"depth": 0}]}', True),
        ("queue.1.depth", '{"queue": [{"depth": 9}, {"depth": 0}]}', False),
        ('jobs.#(state=="pending")#|#', '{"jobs": [{"state": "pending"}]}', True),
        ('jobs.#(state=="pending")#|#', '{"jobs": [{"state": "done"}]}', False),
        ("fav\\.count", '{"fav.count": 2}', True),
        ("remaining", '{"remaining": 4}', True),
        # an empty or missing path means the default, result.remaining
        ("", remaining("4"), True),
        (None, remaining("4"), True),
    ],
)
def test_the_loop_reads_the_configured_path(path: str | None, body: str, continue_: bool) -> None:
    settings = loop_row(loop_response_path=path)
    assert decide_loop(settings=settings, body=body, iteration=0).continue_ is continue_


@pytest.mark.parametrize("enabled", [False, None, 0])
def test_a_job_without_looping_never_continues(enabled: object) -> None:
    decision = decide_loop(
        settings=loop_row(loop_enabled=enabled), body=remaining("5"), iteration=0
    )
    assert decision == LoopDecision(continue_=False, delay_ms=0, value=None, reason="disabled")


@pytest.mark.parametrize(
    ("delay", "jitter"),
    [(1000, 500), (0, 250), (5, 60_000)],
)
def test_jitter_adds_a_uniform_whole_number_of_milliseconds(delay: int, jitter: int) -> None:
    rng = random.Random(2024)
    settings = loop_row(loop_delay_ms=delay, loop_jitter_ms=jitter)
    delays = [
        decide_loop(settings=settings, body=remaining("1"), iteration=0, rng=rng).delay_ms
        for _ in range(500)
    ]
    assert all(delay <= value <= delay + jitter for value in delays)
    assert len(set(delays)) > 100  # spread out, not a constant
    assert min(delays) < delay + jitter / 4 < delay + 3 * jitter / 4 < max(delays)


def test_both_ends_of_the_jitter_range_are_reachable() -> None:
    rng = random.Random(2024)
    settings = loop_row(loop_delay_ms=1000, loop_jitter_ms=1)
    delays = {
        decide_loop(settings=settings, body=remaining("1"), iteration=0, rng=rng).delay_ms
        for _ in range(100)
    }
    assert delays == {1000, 1001}


@pytest.mark.parametrize(
    ("overrides", "delay_ms"),
    [
        ({"loop_delay_ms": 2500, "loop_jitter_ms": 0}, 2500),  # no jitter, no draw
        ({"loop_delay_ms": 0}, 0),
        ({"loop_jitter_ms": None}, 1000),
        ({"loop_delay_ms": -5, "loop_jitter_ms": -5}, 0),  # negatives are clamped to zero
        ({"loop_delay_ms": None}, 1000),  # missing: the registry default
    ],
)
def test_the_delay_without_jitter_is_flat(overrides: dict[str, Any], delay_ms: int) -> None:
    decision = decide_loop(
        settings=loop_row(**overrides), body=remaining("1"), iteration=0, rng=NoRandom()
    )
    assert decision.delay_ms == delay_ms


def test_jitter_without_an_rng_stays_in_bounds() -> None:
    settings = loop_row(loop_delay_ms=100, loop_jitter_ms=50)
    decisions = [
        decide_loop(settings=settings, body=remaining("1"), iteration=0) for _ in range(50)
    ]
    assert all(100 <= decision.delay_ms <= 150 for decision in decisions)


@pytest.mark.parametrize(
    ("max_iterations", "iteration", "continue_", "reason"),
    [
        (3, 0, True, "continue"),
        (3, 1, True, "continue"),
        (3, 2, False, "max_iterations"),  # the third iteration was the last
        (3, 7, False, "max_iterations"),
        (1, 0, False, "max_iterations"),
        (None, 48, True, "continue"),  # missing: 50
        (None, 49, False, "max_iterations"),
        (0, 49, False, "max_iterations"),  # unusable: 50
    ],
)
def test_the_loop_stops_at_max_iterations(
    max_iterations: int | None, iteration: int, continue_: bool, reason: str
) -> None:
    settings = loop_row(loop_max_iterations=max_iterations)
    decision = decide_loop(settings=settings, body=remaining("5"), iteration=iteration)
    assert decision.continue_ is continue_
    assert decision.reason == reason
    assert decision.value == 5.0
    if not continue_:
        assert decision.delay_ms == 0


def test_a_finished_loop_at_the_cap_is_not_reported_as_hitting_it() -> None:
    settings = loop_row(loop_max_iterations=3)
    decision = decide_loop(settings=settings, body=remaining("0"), iteration=2)
    assert decision.reason == "not_positive"


def test_the_cap_message_is_the_documented_log_line() -> None:
    assert MAX_ITERATIONS_MESSAGE == "loop max iterations hit, stopping"


def test_iterations_are_zero_based() -> None:
    with pytest.raises(ValueError, match="0-based"):
        decide_loop(settings=loop_row(), body=remaining("1"), iteration=-1)
