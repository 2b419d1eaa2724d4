"""Retry policy: backoff spacing, coalescing, modes, Retry-After, budgets and refusals."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from zilean.execution.retry import (
    RetryDecision,
    backoff_ms,
    coalesced_budget,
    decide_retry,
)

NOW = datetime(2030, 5, 26, 15, 0, 0, tzinfo=UTC)


def job_row(**overrides: Any) -> dict[str, Any]:
    """A job row's retry settings, with the registry's defaults."""
    return {
        "retry_enabled": True,
        "retry_mode": "exponential",
        "retry_base_delay_ms": 1000,
        "retry_multiplier": 2.0,
        "retry_max_delay_ms": 30_000,
        "retry_max_attempts": 5,
        **overrides,
    }


def decide(
    settings: dict[str, Any] | None = None,
    *,
    attempt: int = 1,
    max_attempts: int = 10**6,
    permanent: bool = False,
    status_code: int | None = 500,
    retry_after: str | None = None,
    now: datetime = NOW,
    rng: random.Random | None = None,
) -> RetryDecision:
    return decide_retry(
        settings=job_row() if settings is None else settings,
        attempt=attempt,
        max_attempts=max_attempts,
        permanent=permanent,
        status_code=status_code,
        retry_after=retry_after,
        now=now,
        rng=rng,
    )


def http_date(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


@pytest.mark.parametrize(
    ("attempt", "delay_ms"),
    [
        (1, 1_000),  # the first retry waits the base delay
        (2, 2_000),
        (3, 4_000),
        (4, 8_000),
        (5, 16_000),
        (6, 30_000),  # 32000 is capped at retry_max_delay_ms
        (7, 30_000),
        (40, 30_000),
    ],
)
def test_exponential_backoff_doubles_up_to_the_cap(attempt: int, delay_ms: int) -> None:
    assert decide(attempt=attempt) == RetryDecision(
        retry=True, delay_ms=delay_ms, reason="exponential"
    )


@pytest.mark.parametrize(
    ("overrides", "attempt", "delay_ms"),
    [
        # base <= 0 becomes 1000 ms
        ({"retry_base_delay_ms": 0}, 1, 1_000),
        ({"retry_base_delay_ms": -250}, 2, 2_000),
        # multiplier <= 1 becomes 2
        ({"retry_multiplier": 1}, 3, 4_000),
        ({"retry_multiplier": 1.0}, 3, 4_000),
        ({"retry_multiplier": 0.5}, 3, 4_000),
        ({"retry_multiplier": -3}, 3, 4_000),
        # max <= 0 becomes 300000 ms (5 minutes)
        ({"retry_max_delay_ms": 0}, 9, 256_000),
        ({"retry_max_delay_ms": 0}, 10, 300_000),
        ({"retry_max_delay_ms": -1}, 30, 300_000),
        # all three unusable at once
        (
            {"retry_base_delay_ms": 0, "retry_multiplier": 0, "retry_max_delay_ms": 0},
            4,
            8_000,
        ),
        # missing or non-numeric settings are unusable too
        ({"retry_base_delay_ms": None, "retry_multiplier": "3"}, 2, 2_000),
        ({"retry_multiplier": True}, 3, 4_000),  # a boolean is not a multiplier
        ({"retry_multiplier": float("nan")}, 3, 4_000),
        # usable values are taken as they are
        ({"retry_multiplier": 1.5}, 3, 2_250),
        ({"retry_multiplier": 1.2}, 4, 1_728),  # 1727.9999999999998 rounds, not truncates
        ({"retry_multiplier": 3, "retry_base_delay_ms": 500}, 3, 4_500),
        ({"retry_base_delay_ms": 60_000}, 1, 30_000),  # base above max: max wins
    ],
)
def test_unusable_settings_are_coalesced(
    overrides: dict[str, Any], attempt: int, delay_ms: int
) -> None:
    assert decide(job_row(**overrides), attempt=attempt).delay_ms == delay_ms


def test_a_row_without_retry_settings_uses_the_coalesced_defaults() -> None:
    delays = [decide({}, attempt=attempt).delay_ms for attempt in (1, 2, 9, 10)]
    assert delays == [1_000, 2_000, 256_000, 300_000]


@pytest.mark.parametrize(
    ("retry_max_attempts", "retry_enabled", "budget"),
    [
        (5, True, 5),
        (1, True, 1),
        (100, True, 100),
        (0, True, 5),  # <= 0 means the default
        (-3, True, 5),
        (5, False, 1),  # disabled: one attempt, whatever the budget says
        (0, False, 1),
    ],
)
def test_the_attempt_budget_is_coalesced_at_insert(
    retry_max_attempts: int, retry_enabled: bool, budget: int
) -> None:
    assert coalesced_budget(retry_max_attempts, retry_enabled) == budget


@pytest.mark.parametrize("attempt", [1, 2, 3, 7, 50])
def test_fixed_mode_waits_the_base_delay_every_time(attempt: int) -> None:
    settings = job_row(retry_mode="fixed", retry_base_delay_ms=1_500)
    assert decide(settings, attempt=attempt) == RetryDecision(
        retry=True, delay_ms=1_500, reason="fixed"
    )


def test_fixed_mode_is_still_capped_by_the_max_delay() -> None:
    settings = job_row(retry_mode="fixed", retry_base_delay_ms=60_000)
    assert decide(settings, attempt=3).delay_ms == 30_000


@pytest.mark.parametrize("mode", ["linear", "", None, "FIXED", 3])
def test_an_unknown_mode_behaves_as_exponential(mode: object) -> None:
    settings = job_row(retry_mode=mode)
    assert [decide(settings, attempt=n).delay_ms for n in (1, 2, 3)] == [1_000, 2_000, 4_000]
    assert decide(settings).reason == "exponential"


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(1, 1_000), (2, 2_000), (3, 4_000), (5, 16_000), (6, 30_000), (1_000, 30_000)],
)
def test_exponential_jitter_draws_uniformly_up_to_the_exponential_delay(
    attempt: int, ceiling: int
) -> None:
    rng = random.Random(1234)
    settings = job_row(retry_mode="exponential_jitter")
    decisions = [decide(settings, attempt=attempt, rng=rng) for _ in range(400)]
    delays = [decision.delay_ms for decision in decisions]
    assert all(0 <= delay <= ceiling for delay in delays)
    assert len(set(delays)) > 100  # spread out, not a constant
    assert min(delays) < ceiling / 4 < 3 * ceiling / 4 < max(delays)
    assert {decision.reason for decision in decisions} == {"exponential_jitter"}


def test_exponential_jitter_is_reproducible_with_a_seed() -> None:
    settings = job_row(retry_mode="exponential_jitter")
    first = [decide(settings, attempt=4, rng=random.Random(7)).delay_ms for _ in range(3)]
    second = [decide(settings, attempt=4, rng=random.Random(7)).delay_ms for _ in range(3)]
    assert first == second


def test_exponential_jitter_without_an_rng_still_stays_in_bounds() -> None:
    settings = job_row(retry_mode="exponential_jitter")
    assert all(0 <= decide(settings, attempt=3).delay_ms <= 4_000 for _ in range(50))


@pytest.mark.parametrize(
    ("settings", "attempt", "status_code", "retry_after", "now", "delay_ms", "reason"),
    [
        # delta seconds above the computed delay become the delay
        (job_row(), 1, 429, "120", NOW, 120_000, "retry_after"),
        (job_row(), 1, 503, "120", NOW, 120_000, "retry_after"),
        (job_row(), 1, 429, "  7 ", NOW, 7_000, "retry_after"),
        # a floor below the computed delay changes nothing
        (job_row(), 5, 429, "10", NOW, 16_000, "exponential"),
        (job_row(), 1, 429, "0", NOW, 1_000, "exponential"),
        # an HTTP-date is read against `now`
        (job_row(), 1, 503, http_date(NOW + timedelta(seconds=90)), NOW, 90_000, "retry_after"),
        (
            job_row(),
            1,
            503,
            http_date(NOW + timedelta(seconds=90)),
            NOW + timedelta(milliseconds=500),
            89_500,
            "retry_after",
        ),
        # ... a naive `now` is UTC
        (
            job_row(),
            1,
            429,
            "Sun, 26 May 2030 15:01:00 GMT",
            NOW.replace(tzinfo=None),
            60_000,
            "retry_after",
        ),
        # a date in the past asks for nothing
        (job_row(), 2, 429, http_date(NOW - timedelta(hours=1)), NOW, 2_000, "exponential"),
        # capped at max(retry_max_delay_ms, 300000)
        (job_row(), 1, 429, "3600", NOW, 300_000, "retry_after"),
        (job_row(), 1, 429, http_date(NOW + timedelta(days=2)), NOW, 300_000, "retry_after"),
        (job_row(), 1, 429, "9" * 40, NOW, 300_000, "retry_after"),
        (job_row(retry_max_delay_ms=600_000), 1, 429, "3600", NOW, 600_000, "retry_after"),
        (job_row(retry_max_delay_ms=0), 1, 429, "3600", NOW, 300_000, "retry_after"),
        # the floor applies to fixed mode too
        (job_row(retry_mode="fixed"), 3, 503, "45", NOW, 45_000, "retry_after"),
        # unreadable headers are ignored
        (job_row(), 1, 429, "soon", NOW, 1_000, "exponential"),
        (job_row(), 1, 429, "-5", NOW, 1_000, "exponential"),
        (job_row(), 1, 429, "1.5", NOW, 1_000, "exponential"),
        (job_row(), 1, 429, "", NOW, 1_000, "exponential"),
    ],
)
def test_retry_after_on_429_and_503_is_a_capped_floor(
    settings: dict[str, Any],
    attempt: int,
    status_code: int,
    retry_after: str,
    now: datetime,
    delay_ms: int,
    reason: str,
) -> None:
    decision = decide(
        settings, attempt=attempt, status_code=status_code, retry_after=retry_after, now=now
    )
    assert decision == RetryDecision(retry=True, delay_ms=delay_ms, reason=reason)


@pytest.mark.parametrize("status_code", [None, 200, 408, 500, 502, 504])
def test_retry_after_is_ignored_for_other_statuses(status_code: int | None) -> None:
    decision = decide(attempt=1, status_code=status_code, retry_after="120")
    assert decision == RetryDecision(retry=True, delay_ms=1_000, reason="exponential")


def test_retry_after_floors_the_jittered_delay() -> None:
    settings = job_row(retry_mode="exponential_jitter")
    rng = random.Random(99)
    delays = [
        decide(settings, attempt=6, status_code=429, retry_after="20", rng=rng).delay_ms
        for _ in range(200)
    ]
    assert all(20_000 <= delay <= 30_000 for delay in delays)
    assert 20_000 in delays  # draws below the floor are raised to it


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "retry"),
    [
        (1, 5, True),
        (4, 5, True),  # the fifth attempt is still in the budget
        (5, 5, False),  # the budget is spent
        (6, 5, False),
        (1, 1, False),  # a budget of one never retries
    ],
)
def test_retries_stop_when_the_attempt_budget_is_spent(
    attempt: int, max_attempts: int, retry: bool
) -> None:
    decision = decide(attempt=attempt, max_attempts=max_attempts)
    assert decision.retry is retry
    if not retry:
        assert decision == RetryDecision(retry=False, delay_ms=0, reason="exhausted")


def test_it_never_retries_when_retries_are_disabled() -> None:
    decision = decide(
        job_row(retry_enabled=False), attempt=1, max_attempts=5, status_code=429, retry_after="5"
    )
    assert decision == RetryDecision(retry=False, delay_ms=0, reason="retry_disabled")


@pytest.mark.parametrize(
    "settings",
    [
        job_row(),
        job_row(retry_enabled=False),
        job_row(retry_mode="exponential_jitter"),
    ],
)
def test_it_never_retries_a_permanent_error(settings: dict[str, Any]) -> None:
    decision = decide(settings, attempt=1, max_attempts=5, permanent=True, status_code=None)
    assert decision == RetryDecision(retry=False, delay_ms=0, reason="permanent")


@pytest.mark.parametrize(
    ("overrides", "attempt"),
    [
        ({}, 1_025),  # 2.0 ** 1024 overflows a float
        ({}, 10**6),
        ({}, 2**64),
        ({"retry_multiplier": 1e300, "retry_base_delay_ms": 1}, 3),
        ({"retry_multiplier": 10, "retry_max_delay_ms": 9_000_000_000_000_000_000}, 10**9),
        ({"retry_mode": "exponential_jitter"}, 10**12),
    ],
)
def test_huge_attempt_numbers_do_not_overflow(overrides: dict[str, Any], attempt: int) -> None:
    settings = job_row(**overrides)
    cap = settings["retry_max_delay_ms"]
    decision = decide(settings, attempt=attempt, max_attempts=attempt + 1, rng=random.Random(3))
    assert decision.retry
    assert 0 <= decision.delay_ms <= cap
    if settings["retry_mode"] == "exponential":
        assert decision.delay_ms == cap


@pytest.mark.parametrize(
    ("base", "multiplier", "cap", "attempt", "delay_ms"),
    [
        (1_000, 2.0, 300_000, 1, 1_000),
        (1_000, 2.0, 300_000, 9, 256_000),
        (1_000, 2.0, 300_000, 10, 300_000),
        (1_000, 2.0, 8_000, 4, 8_000),  # exactly at the cap
        (1, 1.0000001, 300_000, 10**9, 300_000),
        (1_000, 2.0, 300_000, 10**100, 300_000),
    ],
)
def test_backoff_formula(
    base: int, multiplier: float, cap: int, attempt: int, delay_ms: int
) -> None:
    assert backoff_ms(base, multiplier, cap, attempt) == delay_ms


def test_attempt_numbers_are_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        decide(attempt=0)
