"""The script environment's naming rules: `GLOBALVAR_` names, left-out names and clashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from zilean.jobkinds.script.environment import globalvar_name, script_environment


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("region", "GLOBALVAR_REGION"),
        ("api_key_2", "GLOBALVAR_API_KEY_2"),
        ("a__b", "GLOBALVAR_A_B"),  # a run of separators is one underscore
        ("Mixed_Case", "GLOBALVAR_MIXED_CASE"),
        ("", None),  # empty
        ("___", None),  # separators only
        ("2fast", None),  # starts with a digit
        ("café", None),  # not ASCII: left out rather than mangled
    ],
)
def test_a_variable_name_maps_to_one_environment_name_or_is_left_out(
    name: str, expected: str | None
) -> None:
    assert globalvar_name(name) == expected


def environment(variables: list[tuple[str, str]]) -> dict[str, str]:
    return script_environment(
        path="/usr/bin",
        job_name="nightly",
        pool_index=0,
        loop_iteration=3,
        timezone=None,
        volumes={"reports": Path("/srv/volumes/reports")},
        variables=variables,
        runtime={"JAVA_HOME": "/usr/lib/jvm/default"},
    )


def test_the_injected_names_are_set_and_tz_only_when_the_worker_has_one() -> None:
    assert environment([("region", "eu")]) == {
        "PATH": "/usr/bin",
        "ZILEAN_JOB_NAME": "nightly",
        "ZILEAN_POOL_IDX": "0",
        "ZILEAN_LOOP_ITERATION": "3",
        "ZILEAN_VOLUME_REPORTS": "/srv/volumes/reports",
        "JAVA_HOME": "/usr/lib/jvm/default",
        "GLOBALVAR_REGION": "eu",
    }


def test_two_variables_that_map_to_one_name_are_both_left_out() -> None:
    result = environment([("a_b", "one"), ("A_B", "two"), ("other", "kept")])
    assert "GLOBALVAR_A_B" not in result
    assert result["GLOBALVAR_OTHER"] == "kept"
