"""The CPU meter's shares: over the work's own duration when it is given, not the poll's."""

from __future__ import annotations

import time

import psutil
from benchmarks.cpu import CpuMeter

BURN = 0.05  # CPU seconds the test process spends inside the measured window
IDLE_TAIL = 0.2  # seconds the window then lasts with nothing done, as a poll's wait would


def _burn(seconds: float) -> None:
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


def _measure(*, busy: float | None) -> float:
    me = psutil.Process()
    meter = CpuMeter({"suite": lambda: [me]})
    started = meter.start()
    _burn(BURN)
    time.sleep(IDLE_TAIL)  # the idle tail is what is measured here, not a wait
    meter.stop(started, 1, busy=busy)
    return meter.shares()["suite"]


def test_shares_are_over_the_work_s_own_duration_when_it_is_given() -> None:
    # The work spent BURN of CPU in BURN seconds: one core busy.
    assert 0.8 < _measure(busy=BURN) < 1.5


def test_shares_without_a_duration_count_the_idle_tail_of_the_window() -> None:
    assert _measure(busy=None) < BURN / IDLE_TAIL + 0.05
