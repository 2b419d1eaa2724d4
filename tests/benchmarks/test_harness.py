"""The benchmark suite's harness: statistics, figures and their verdicts, the report, the
interleaving, and tiny real runs through the suite's own code path: the burst, the
throughput scenario with both of its baselines (the limit and the alternative), the
script scenario with its bare loops, and the raw engine that schedule_lag and
delay_precision measure against.

No timing targets here: whether Zilean meets the issue's goals is the suite's job.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, On, at_least, at_most, failed
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.postgres import TEMPLATE, drop_database, prepare_async
from benchmarks.processes import Processes
from benchmarks.raw_engine import ENQUEUE_CONNECTIONS, Enqueuer, enqueue_to_start, starts, waiting
from benchmarks.report import COLUMNS, render_table, to_json
from benchmarks.scales import FULL, QUICK
from benchmarks.scenario import Scenario
from benchmarks.scenarios import all_scenarios, attempt_throughput, burst, script_throughput
from benchmarks.services import start_bare_scripts, start_raw_engine, start_target
from benchmarks.stats import median, pairwise_ratios, percentile

from zilean.db.engine import create_engine
from zilean.scheduler.reconciler import FIRE_CONCURRENCY

ISSUE_KEYS = {"name", "value", "unit", "baseline", "ratio", "target", "meets"}


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([3.0, 1.0, 2.0], 50, 2.0),  # odd count: the middle value, whatever the order
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # even count: halfway between the middle two
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),  # p100 is the maximum
        ([10.0], 99, 10.0),  # one value is every percentile
        ([0.0, 100.0], 99, 99.0),  # linear between ranks, not snapped to the maximum
    ],
)
def test_percentiles_interpolate_between_ranks(
    values: list[float], p: float, expected: float
) -> None:
    assert percentile(values, p) == pytest.approx(expected)


def test_a_median_of_nothing_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_pairwise_ratios_skip_a_zero_baseline_and_refuse_unpaired_samples() -> None:
    assert pairwise_ratios([2.0, 3.0, 4.0], [1.0, 0.0, 8.0]) == [2.0, 0.5]
    with pytest.raises(ValueError, match="unpaired"):
        pairwise_ratios([1.0, 2.0], [1.0])


def test_a_ratio_target_is_judged_on_the_median_of_the_pair_ratios() -> None:
    spec = FigureSpec("throughput", "attempts/s", at_least(0.9, on=On.RATIO))
    # Pair ratios 0.9, 1.0 and 0.5: their median is 0.9, unlike 90 / 100 of the medians.
    figure = spec.figure([90.0, 100.0, 50.0], [100.0, 100.0, 100.0])
    assert figure.value == 90.0
    assert figure.baseline == 100.0
    assert figure.ratio == pytest.approx(0.9)
    assert figure.meets is True
    assert figure.target is not None
    assert figure.target.describe("attempts/s") == "ratio >= 0.9"


def test_a_value_target_is_judged_on_the_median_not_the_best_sample() -> None:
    figure = FigureSpec("lag", "ms", at_most(100.0)).figure([50.0, 120.0, 130.0])
    assert figure.value == 120.0
    assert figure.ratio is None  # no baseline, no ratio
    assert figure.meets is False


def test_a_figure_without_a_target_gives_no_verdict() -> None:
    figure = FigureSpec("capacity", "req/s").figure([1.0, 2.0, 3.0])
    assert figure.meets is None
    assert figure.to_json()["meets"] is None


def test_an_unmeasured_figure_never_meets_its_target() -> None:
    figure = failed("lag", "ms", at_most(100.0), "the route answered 404")
    assert figure.value is None
    assert figure.meets is False
    assert figure.note == "not measured: the route answered 404"


def test_the_json_is_one_object_per_figure_with_the_issues_keys() -> None:
    figures = [
        FigureSpec("a", "ms", at_most(1.0)).figure([0.5, 0.7], [0.2, 0.2], note="why", extra=1),
        failed("b", "MiB", None, "crashed"),
    ]
    parsed = json.loads(to_json(figures))
    assert [item["name"] for item in parsed] == ["a", "b"]
    assert all(item.keys() >= ISSUE_KEYS for item in parsed)
    assert parsed[0]["value"] == 0.6
    assert parsed[0]["ratio"] == 3.0
    assert parsed[0]["target"] == "<= 1 ms"
    assert parsed[0]["meets"] is True
    assert (parsed[0]["min"], parsed[0]["max"], parsed[0]["extra"]) == (0.5, 0.7, 1)
    assert (parsed[1]["value"], parsed[1]["meets"], parsed[1]["target"]) == (None, None, None)


def test_the_table_has_every_column_every_figure_and_their_notes() -> None:
    figures = [
        FigureSpec("met", "ms", at_most(10.0)).figure([1.0, 2.0, 3.0], [1.0, 1.0, 1.0]),
        FigureSpec("missed", "ms", at_most(1.0)).figure([5.0], note="slow on purpose"),
        FigureSpec("untargeted", "x").figure([1.0]),
    ]
    table = render_table(figures)
    header, rule, *rows = table.splitlines()[:5]
    assert header.split() == list(COLUMNS)
    assert set(rule) <= {"-", " "}
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells["met"][1:3] == ["2", "ms"]
    assert "yes" in cells["met"]
    assert "1/3" in cells["met"]
    assert "no" in cells["missed"]
    assert cells["untargeted"][-2:] == ["-", "1/1"]
    assert "Notes:" in table
    assert "- missed: slow on purpose" in table


async def test_interleaving_alternates_the_steps_and_drops_the_warm_up() -> None:
    calls: list[str] = []

    def step(name: str) -> Callable[[], Awaitable[int]]:
        async def run() -> int:
            calls.append(name)
            return len(calls)

        return run

    results = await interleave(2, [("baseline", step("b")), ("subject", step("s"))], warmup=1)
    assert calls == ["b", "s", "b", "s", "b", "s"]
    assert results == {"baseline": [3, 5], "subject": [4, 6]}


async def test_a_wait_that_never_comes_true_fails_with_its_reason() -> None:
    async def never() -> bool:
        return False

    with pytest.raises(BenchError, match="waiting for the impossible"):
        await wait_until(never, within=0.05, what="the impossible", interval=0.01)


def test_every_scenario_promises_figures_with_unique_names() -> None:
    names = [spec.name for scenario in all_scenarios() for spec in scenario.specs]
    assert all(scenario.specs for scenario in all_scenarios())
    assert len(names) == len(set(names))


async def tiny_run(
    scenario: Scenario, postgres_admin_url: str, tmp_path: Path, **scale: Any
) -> list[Figure]:
    """Run `scenario` once (a warm-up and one pair) at `QUICK` with `scale` replaced, on
    the suite's own Postgres template and HTTP target, stopping every child afterwards."""
    postgres = await prepare_async(postgres_admin_url)
    processes = Processes(tmp_path)
    try:
        target, target_url = await start_target(processes)
        tiny = dataclasses.replace(QUICK, pairs=1, **scale)
        return await scenario.run(
            BenchContext(postgres, processes, target, target_url, tiny, tmp_path)
        )
    finally:
        processes.stop_all()
        drop_database(postgres_admin_url, TEMPLATE)


async def test_a_tiny_burst_runs_through_the_suites_own_code_path(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    [figure] = await tiny_run(burst.SCENARIO, postgres_admin_url, tmp_path, burst_jobs=50)
    assert figure.name == "burst_enqueue"
    assert len(figure.samples) == len(figure.baseline_samples) == 1
    assert figure.value is not None
    assert figure.value > 0
    assert figure.extra["measured_jobs"] == 50
    assert isinstance(figure.meets, bool)
    assert "scaled linearly" in figure.note


def test_delay_runs_span_the_same_time_whatever_their_delay() -> None:
    # 6 s of continuations: 20 of 300 ms, 3 of 2 s, each after the first attempt.
    assert (FULL.delay_attempts(300), FULL.delay_attempts(2_000)) == (21, 4)
    assert QUICK.delay_attempts(2_000) >= 2  # every cell has a continuation to measure


def test_the_raw_engine_enqueues_as_the_scheduler_fires() -> None:
    assert ENQUEUE_CONNECTIONS == FIRE_CONCURRENCY


async def test_a_tiny_throughput_run_measures_the_subject_and_both_baselines(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    figures = await tiny_run(
        attempt_throughput.SCENARIO,
        postgres_admin_url,
        tmp_path,
        throughput_jobs=2,
        throughput_pool=2,
    )
    by_name = {figure.name: figure for figure in figures}
    assert set(by_name) == {"attempt_throughput_vs_alternative", "attempt_throughput_vs_limit"}
    for figure in figures:
        assert len(figure.samples) == len(figure.baseline_samples) == 1
        assert figure.value is not None
        assert figure.ratio is not None
        assert isinstance(figure.meets, bool)
    assert "Procrastinate" in by_name["attempt_throughput_vs_alternative"].note
    assert "SKIP LOCKED" in by_name["attempt_throughput_vs_limit"].note


async def test_a_tiny_script_run_measures_the_worker_both_bare_loops_and_its_memory(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    figures = await tiny_run(
        script_throughput.SCENARIO,
        postgres_admin_url,
        tmp_path,
        throughput_jobs=2,
        throughput_pool=3,
        footprint_idle=0.2,
    )
    by_name = {figure.name: figure for figure in figures}
    assert list(by_name) == [spec.name for spec in script_throughput.SCENARIO.specs]
    for figure in figures:
        assert len(figure.samples) == len(figure.baseline_samples) == 1
        assert figure.value is not None
        assert figure.value > 0
        assert figure.ratio is not None
        assert figure.ratio > 0
        assert figure.meets is None  # the issue sets no target for scripts
    throughput = by_name["script_throughput"]
    assert "standard-library asyncio" in throughput.note
    assert "uvloop" in by_name["script_throughput_vs_uvloop"].note
    [busy] = throughput.extra["busy_slots"]
    assert 0 < busy <= script_throughput.SCRIPT_WORKER_CONCURRENCY
    # The runner's own clock runs inside the attempt's, from start marker to record.
    assert throughput.extra["script_ms_p50"][0] <= throughput.extra["attempt_ms_p50"][0]
    load = by_name["script_worker_rss_load"]
    assert load.extra["peak_mib"][0] >= load.samples[0]  # the peak bounds the median


async def test_the_bare_script_loop_reports_scripts_that_fail(tmp_path: Path) -> None:
    processes = Processes(tmp_path)
    try:
        bare = await start_bare_scripts(processes, "asyncio", "exit 3", count=4, concurrency=2)
        with pytest.raises(BenchError, match="4 of the bare loop's 4 scripts did not exit 0"):
            await script_throughput.bare_round(bare, 1, within=10.0)
    finally:
        processes.stop_all()


async def test_the_raw_engine_runs_due_jobs_and_its_log_gives_their_start(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    postgres = await prepare_async(postgres_admin_url)
    processes = Processes(tmp_path)
    url = postgres.clone("raw_engine")
    engine = create_engine(url)
    try:
        await start_raw_engine(processes, engine, url, concurrency=4)
        window_start = datetime.now(UTC)
        async with Enqueuer(url) as enqueuer:
            await enqueuer.enqueue(5)
            [delayed] = await enqueuer.enqueue_one(timedelta(milliseconds=200))

        async def all_picked() -> bool:
            return await waiting(engine) == 0

        await wait_until(all_picked, within=10.0, what="the raw engine to pick every job")
        now = datetime.now(UTC) + timedelta(seconds=1)
        started = await enqueue_to_start(engine, window_start, now)
        [(queued_at, picked_at)] = (await starts(engine, [delayed])).values()
    finally:
        await engine.dispose()
        processes.stop_all()
        postgres.drop(url)
        drop_database(postgres_admin_url, TEMPLATE)
    assert len(started) == 6
    assert all(picked is not None and picked >= queued for queued, picked in started)
    assert picked_at is not None
    assert picked_at - queued_at >= timedelta(milliseconds=200)  # never before it is due
