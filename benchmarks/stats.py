"""Order statistics for samples: medians over pairs, percentiles over latencies."""

from __future__ import annotations

import math
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    """Return the median; raise ValueError on no values (a figure with no sample is an error)."""
    return percentile(values, 50.0)


def percentile(values: Sequence[float], p: float) -> float:
    """Return the `p`th percentile (0..100) with linear interpolation between ranks.

    Interpolation keeps p99 of a few hundred latencies from jumping to the maximum.
    """
    if not values:
        raise ValueError("no values")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def pairwise_ratios(subject: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Return subject/baseline for each interleaved pair, skipping pairs with a zero baseline.

    Pairs are compared one by one because interleaving is there to cancel slow drift
    (a warming cache, a neighbour's load) that a ratio of overall medians would keep.
    """
    if len(subject) != len(baseline):
        raise ValueError(f"unpaired samples: {len(subject)} subject, {len(baseline)} baseline")
    return [s / b for s, b in zip(subject, baseline, strict=True) if b != 0]
