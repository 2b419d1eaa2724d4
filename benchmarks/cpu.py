"""Where the CPU went during a measurement: the evidence for "what was the bottleneck".

On two cores a throughput figure means little without knowing who was busy: the worker,
Postgres, the target, or the suite itself. `CpuMeter` reads CPU seconds per process
group before and after a step and reports each as a share of one core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import psutil

Group = Callable[[], Sequence[psutil.Process]]


def _cpu_seconds(processes: Sequence[psutil.Process]) -> dict[int, float]:
    seconds: dict[int, float] = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        seconds[process.pid] = times.user + times.system
    return seconds


def postgres_processes(postmaster_pid: int) -> list[psutil.Process]:
    """The postmaster and every backend it forked (connections come and go)."""
    try:
        postmaster = psutil.Process(postmaster_pid)
        return [postmaster, *postmaster.children()]
    except psutil.Error:
        return []


@dataclass
class CpuMeter:
    """CPU shares (1.0 = one full core) of named process groups over measured steps."""

    groups: Mapping[str, Group]
    unit: str = "attempt"  # what `stop(items=...)` counts, for the per-item figures
    _totals: dict[str, float] = field(default_factory=dict)
    _wall: float = 0.0
    _items: int = 0

    def start(self) -> tuple[float, dict[str, dict[int, float]]]:
        return time.monotonic(), {name: _cpu_seconds(get()) for name, get in self.groups.items()}

    def stop(
        self,
        started: tuple[float, dict[str, dict[int, float]]],
        items: int = 0,
        *,
        busy: float | None = None,
    ) -> None:
        """Add the CPU used since `started` by processes alive at both ends, for `items`
        units of work (attempts, iterations) done in between.

        `busy` is how long the work itself took, by its own timestamps (seconds): the
        shares are then CPU over that time. Without it they are over the whole window,
        which also holds the poll that noticed the work had ended, idle time that reads
        a tenth or more of a short round and makes every process look less busy.
        """
        began, before = started
        self._wall += time.monotonic() - began if busy is None else busy
        self._items += items
        for name, get in self.groups.items():
            after = _cpu_seconds(get())
            used = sum(after[pid] - before[name][pid] for pid in after if pid in before[name])
            self._totals[name] = self._totals.get(name, 0.0) + used

    def shares(self) -> dict[str, float]:
        if not self._wall:
            return {}
        return {name: used / self._wall for name, used in self._totals.items()}

    def per_item(self) -> dict[str, float]:
        """CPU milliseconds per unit of work, by group (empty when no items were counted)."""
        if not self._items:
            return {}
        return {name: used * 1000.0 / self._items for name, used in self._totals.items()}

    def describe(self) -> str:
        """E.g. 'CPU (cores): worker 0.93, postgres 0.71; ms per attempt: worker 1.5, ...'."""
        parts = [f"{name} {share:.2f}" for name, share in self.shares().items()]
        if not parts:
            return ""
        text = "CPU (cores): " + ", ".join(parts)
        per_item = [f"{name} {ms:.2f}" for name, ms in self.per_item().items()]
        if per_item:
            text += f"; CPU ms per {self.unit}: " + ", ".join(per_item)
        return text
