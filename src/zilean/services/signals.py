"""Turn SIGINT and SIGTERM into an asyncio event for the phases before a server owns signals."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Seconds a worker's running jobs get to finish after SIGINT/SIGTERM; its supervisor
# (`zilean up`) waits a little longer before it kills the worker.
SOFT_STOP = 25.0


@contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set `stop` on SIGINT or SIGTERM while the block runs; restore default handling after."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
