"""Retry policy: whether a failed attempt runs again, and after how long.

The policy is a pure function of the job row, the attempt number and the failure. It
returns a `RetryDecision`; the worker turns that into a reschedule or a cancellation.
Settings are read from the row passed in on every call, so an edit to the backoff
takes effect on the next failure. The attempt budget is the exception: it is fixed when
the attempt is queued (`coalesced_budget`) and handed back as `max_attempts`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from zilean.registry.kinds import RetryMode

# Replacements for unusable settings (zero, negative, not a number).
DEFAULT_BASE_DELAY_MS = 1_000
DEFAULT_MULTIPLIER = 2.0
DEFAULT_MAX_DELAY_MS = 300_000  # 5 minutes
DEFAULT_MAX_ATTEMPTS = 5

# A server's Retry-After is honoured up to the larger of the job's max delay and this.
RETRY_AFTER_CEILING_MS = 300_000  # 5 minutes
RETRY_AFTER_STATUSES = frozenset({429, 503})
# Longer digit strings are clamped rather than converted (int() refuses huge strings).
_MAX_DELTA_SECONDS_DIGITS = 12

_SYSTEM_RANDOM = random.SystemRandom()


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What to do after a failed attempt.

    `reason` is one of `permanent`, `retry_disabled`, `exhausted` (no retry), or the
    mode that produced the delay (`exponential`, `fixed`, `exponential_jitter`), or
    `retry_after` when the server's Retry-After raised the delay.
    """

    retry: bool
    delay_ms: int
    reason: str


def coalesced_budget(retry_max_attempts: int, retry_enabled: bool) -> int:
    """Return the total number of attempts a newly queued attempt chain may use.

    Disabled retries give one attempt; a budget of zero or less means the default, 5.
    """
    if not retry_enabled:
        return 1
    if retry_max_attempts <= 0:
        return DEFAULT_MAX_ATTEMPTS
    return retry_max_attempts


def decide_retry(
    *,
    settings: Mapping[str, Any],
    attempt: int,
    max_attempts: int,
    permanent: bool,
    status_code: int | None,
    retry_after: str | None,
    now: datetime,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Decide whether the attempt that just failed is retried, and the wait before it.

    `attempt` is 1-based and names the failed attempt; `max_attempts` is the budget fixed
    at insert. A permanent (configuration) error, a job with retries disabled, or a spent
    budget is never retried. `retry_after` is the raw header; it only counts on a 429 or
    503, as a floor under the computed delay. `now` is the clock an HTTP-date is read
    against; a naive `now` is taken as UTC.
    """
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    if permanent:
        return RetryDecision(retry=False, delay_ms=0, reason="permanent")
    if not _flag(settings.get("retry_enabled"), default=True):
        return RetryDecision(retry=False, delay_ms=0, reason="retry_disabled")
    if attempt >= max_attempts:
        return RetryDecision(retry=False, delay_ms=0, reason="exhausted")

    base = _usable_ms(settings.get("retry_base_delay_ms"), DEFAULT_BASE_DELAY_MS)
    multiplier = _usable_multiplier(settings.get("retry_multiplier"))
    max_delay = _usable_ms(settings.get("retry_max_delay_ms"), DEFAULT_MAX_DELAY_MS)
    mode = _mode(settings.get("retry_mode"))

    if mode is RetryMode.FIXED:
        delay = min(base, max_delay)
    else:
        delay = backoff_ms(base, multiplier, max_delay, attempt)
        if mode is RetryMode.EXPONENTIAL_JITTER:
            delay = (rng or _SYSTEM_RANDOM).randint(0, delay)

    reason = str(mode)
    if status_code in RETRY_AFTER_STATUSES and retry_after is not None:
        floor = _retry_after_ms(retry_after, now, cap_ms=max(max_delay, RETRY_AFTER_CEILING_MS))
        if floor is not None and floor > delay:
            delay, reason = floor, "retry_after"
    return RetryDecision(retry=True, delay_ms=delay, reason=reason)


def backoff_ms(base_ms: int, multiplier: float, max_ms: int, attempt: int) -> int:
    """Return `min(base × multiplier^(attempt−1), max)` in whole milliseconds.

    Expects settings already coalesced (base and max > 0, multiplier > 1). Never overflows:
    once the exponent would carry the delay past `max_ms` the power is not computed.
    """
    exponent = attempt - 1
    if exponent <= 0 or base_ms >= max_ms:
        return min(base_ms, max_ms)
    # The exponent at which the delay reaches the cap; past it, the cap is the answer.
    if exponent >= math.log(max_ms / base_ms) / math.log(multiplier):
        return max_ms
    # Rounded, not truncated: 1000 × 1.2³ is 1727.9999999999998 in floating point.
    return min(round(base_ms * multiplier**exponent), max_ms)


def _retry_after_ms(header: str, now: datetime, *, cap_ms: int) -> int | None:
    """Return the wait a Retry-After header asks for, at most `cap_ms`.

    Both forms are read: delta seconds (`120`) and an HTTP-date. A date in the past asks
    for no wait. Return None when the header is neither.
    """
    text = header.strip()
    if text.isascii() and text.isdigit():
        if len(text) > _MAX_DELTA_SECONDS_DIGITS:
            return cap_ms
        return min(int(text) * 1_000, cap_ms)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    # "-0000" in an HTTP-date yields a naive datetime; the header is always GMT.
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    # Round up so the retry never fires before the time the server named.
    return min(max(0, math.ceil((when - now).total_seconds() * 1_000)), cap_ms)


def _mode(value: object) -> RetryMode:
    try:
        return RetryMode(str(value))
    except ValueError:
        return RetryMode.EXPONENTIAL


def _flag(value: object, *, default: bool) -> bool:
    return default if value is None else bool(value)


def _usable_ms(value: object, default: int) -> int:
    # bool is an int subclass; a stray True must not become a 1 ms delay.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    if not math.isfinite(value) or value <= 0:
        return default
    return max(1, int(value))


def _usable_multiplier(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_MULTIPLIER
    multiplier = float(value)
    if not math.isfinite(multiplier) or multiplier <= 1:
        return DEFAULT_MULTIPLIER
    return multiplier
