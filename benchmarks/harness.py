"""How the suite measures: interleaved rounds after a warm-up, and bounded waits.

Interleaving (baseline, subject, baseline, subject, ...) makes slow drift on a shared
2-core machine hit both sides of a comparison alike. Every wait is on a condition with a
timeout, never a bare sleep: a stuck service fails the scenario instead of the clock.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL = 0.05  # seconds between checks of a condition


def say(message: str) -> None:
    """Report progress on stderr (the table goes to stdout)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A scenario step failed; the scenario reports it in a note instead of a number."""


async def wait_until(
    check: Callable[[], Awaitable[bool]],
    *,
    within: float,
    what: str,
    interval: float = POLL_INTERVAL,
) -> float:
    """Poll `check` until it is true; return the seconds it took, or raise BenchError."""
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if time.monotonic() - started >= within:
            raise BenchError(f"timed out after {within:g} s waiting for {what}")
        await asyncio.sleep(interval)


async def interleave(
    rounds: int,
    steps: Sequence[tuple[str, Callable[[], Awaitable[T]]]],
    *,
    warmup: int = 1,
) -> dict[str, list[T]]:
    """Run every step once per round, in the order given, `warmup` + `rounds` times.

    Warm-up rounds (first connections, imports, plan caches, JIT-less Python's cold
    paths) are run in full and dropped. Return each step's results, one per round.
    """
    if rounds < 1:
        raise ValueError("at least one round")
    results: dict[str, list[T]] = {name: [] for name, _ in steps}
    for index in range(warmup + rounds):
        for name, step in steps:
            result = await step()
            if index >= warmup:
                results[name].append(result)
    return results
