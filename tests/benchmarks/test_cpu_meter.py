"""The CPU meter's shares: over the work's own duration when it is given, not the poll's."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
from benchmarks.cpu import CpuMeter

# CPU seconds the child spends inside the measured window: long against the 10 ms clock
# tick in which the kernel counts a process's CPU time.
BURN = 0.2
IDLE_TAIL = 0.2  # seconds the window then lasts with nothing done, as a poll's wait would

# Waits for a line, burns BURN seconds of CPU, says so, then waits to be killed.
CHILD = f"""
import sys, time
sys.stdin.readline()
until = time.process_time() + {BURN}
while time.process_time() < until:
    pass
print("burnt", flush=True)
sys.stdin.readline()
"""


def _measure(*, busy: float | None) -> float:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            process = psutil.Process(child.pid)
            meter = CpuMeter({"child": lambda: [process]})
            started = meter.start()
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "burnt"
            time.sleep(IDLE_TAIL)  # the idle tail is what is measured here, not a wait
            meter.stop(started, 1, busy=busy)
        finally:
            child.kill()
    return meter.shares()["child"]


def test_shares_are_over_the_work_s_own_duration_when_it_is_given() -> None:
    # The child spent BURN of CPU, and the work is said to have taken BURN: one core.
    assert 0.85 < _measure(busy=BURN) < 1.2


def test_shares_without_a_duration_count_the_idle_tail_of_the_window() -> None:
    # BURN of CPU over at least BURN + IDLE_TAIL seconds, give or take a clock tick.
    assert _measure(busy=None) < (BURN + 0.02) / (BURN + IDLE_TAIL)
