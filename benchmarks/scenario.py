"""What a scenario is: a name, the figures it promises, and the coroutine measuring them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec


@dataclass(frozen=True)
class Scenario:
    """`specs` are declared up front, so a scenario that fails still reports each of its
    figures as not measured instead of dropping rows from the table."""

    name: str
    specs: tuple[FigureSpec, ...]
    run: Callable[[BenchContext], Awaitable[list[Figure]]]

    def failed(self, reason: str) -> list[Figure]:
        return [spec.failed(reason) for spec in self.specs]
