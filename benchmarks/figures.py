"""One reported number: its samples, its baseline, its target and whether it meets it.

A figure never invents a value: with no samples its value is None, and a figure with a
target it could not measure says `meets: false` with the reason in `note`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from benchmarks.stats import median, pairwise_ratios


class Op(StrEnum):
    AT_LEAST = ">="
    AT_MOST = "<="


class On(StrEnum):
    VALUE = "value"  # the target bounds the figure itself (e.g. p99 <= 100 ms)
    RATIO = "ratio"  # the target bounds value / baseline (e.g. >= 3 x the alternative)


@dataclass(frozen=True)
class Target:
    """A goal from the issue: `on` (value or ratio) `op` `threshold`."""

    op: Op
    threshold: float
    on: On = On.VALUE

    def describe(self, unit: str) -> str:
        if self.on is On.RATIO:
            return f"ratio {self.op} {self.threshold:g}"
        return f"{self.op} {self.threshold:g} {unit}".rstrip()

    def met(self, value: float | None, ratio: float | None) -> bool:
        """Return whether the figure meets the target; an unmeasured figure never does."""
        measured = ratio if self.on is On.RATIO else value
        if measured is None:
            return False
        if self.op is Op.AT_LEAST:
            return measured >= self.threshold
        return measured <= self.threshold


def at_least(threshold: float, *, on: On = On.VALUE) -> Target:
    return Target(Op.AT_LEAST, threshold, on)


def at_most(threshold: float, *, on: On = On.VALUE) -> Target:
    return Target(Op.AT_MOST, threshold, on)


@dataclass(frozen=True)
class Figure:
    """A scenario's figure over its interleaved pairs.

    `samples[i]` and `baseline_samples[i]` come from the same pair when both are given;
    `ratio` is then the median of the per-pair ratios, not the ratio of the medians.
    """

    name: str
    unit: str
    samples: Sequence[float] = ()
    baseline_samples: Sequence[float] = ()
    target: Target | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def value(self) -> float | None:
        return median(self.samples) if self.samples else None

    @property
    def baseline(self) -> float | None:
        return median(self.baseline_samples) if self.baseline_samples else None

    @property
    def ratio(self) -> float | None:
        if not self.samples or not self.baseline_samples:
            return None
        if len(self.samples) == len(self.baseline_samples):
            ratios = pairwise_ratios(self.samples, self.baseline_samples)
            return median(ratios) if ratios else None
        value, baseline = self.value, self.baseline
        return None if value is None or not baseline else value / baseline

    @property
    def meets(self) -> bool | None:
        """None when the issue sets no target for this figure."""
        if self.target is None:
            return None
        return self.target.met(self.value, self.ratio)

    def with_note(self, note: str) -> Figure:
        joined = f"{self.note}; {note}" if self.note else note
        return replace(self, note=joined)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": _rounded(self.value),
            "unit": self.unit,
            "baseline": _rounded(self.baseline),
            "ratio": _rounded(self.ratio),
            "target": self.target.describe(self.unit) if self.target else None,
            "meets": self.meets,
            "min": _rounded(min(self.samples)) if self.samples else None,
            "max": _rounded(max(self.samples)) if self.samples else None,
            "samples": [_rounded(s) for s in self.samples],
            "baseline_samples": [_rounded(s) for s in self.baseline_samples],
            "note": self.note,
            **{key: _json_ready(value) for key, value in self.extra.items()},
        }


def failed(name: str, unit: str, target: Target | None, reason: str) -> Figure:
    """A figure that could not be measured: no value, and `meets` false when it had a target."""
    return Figure(name=name, unit=unit, target=target, note=f"not measured: {reason}")


def _rounded(value: float | None) -> float | None:
    """Keep four significant digits: more would pretend a precision the runs do not have.

    NaN and infinities become None: JSON has no spelling for them.
    """
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")


def _json_ready(value: Any) -> Any:
    """Round every float inside an extra value, however nested."""
    if isinstance(value, float):
        return _rounded(value)
    if isinstance(value, dict):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    return value


@dataclass(frozen=True)
class FigureSpec:
    """What a scenario promises to report: the name, unit and target of one figure.

    Declared up front so a scenario that fails still reports each of its figures, as
    not measured, instead of silently dropping a row.
    """

    name: str
    unit: str
    target: Target | None = None

    def figure(
        self,
        samples: Sequence[float],
        baseline_samples: Sequence[float] = (),
        *,
        note: str = "",
        **extra: Any,
    ) -> Figure:
        return Figure(
            name=self.name,
            unit=self.unit,
            samples=list(samples),
            baseline_samples=list(baseline_samples),
            target=self.target,
            note=note,
            extra=extra,
        )

    def failed(self, reason: str) -> Figure:
        return failed(self.name, self.unit, self.target, reason)
