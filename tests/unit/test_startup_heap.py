"""A worker process freezes its start-up heap once, however many workers it runs.

Run in a child interpreter: freezing this test process's heap would outlive the test.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc
from zilean.services.heap import freeze_startup_heap

kept = [[i] for i in range(1000)]  # start-up objects, alive from here on
freeze_startup_heap()
first = gc.get_freeze_count()
running = [[i] for i in range(1000)]  # what the first worker's attempts hold
freeze_startup_heap()  # a second worker in the same process starting up
print(first, gc.get_freeze_count())
"""


def test_the_first_call_freezes_and_a_second_worker_in_the_process_does_not() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    first, second = done.stdout.split()
    assert int(first) >= 1000  # the start-up objects are frozen
    assert int(second) == int(first)  # the running attempts' objects are not
