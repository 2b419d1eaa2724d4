"""Background loops: sleep until told to stop, and repeat a step at an interval."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


async def wait_for_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep up to `seconds`, returning at once when `stop` is set."""
    if seconds <= 0:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def every(
    interval: float,
    stop: asyncio.Event,
    step: Callable[[], Awaitable[None]],
    *,
    failure: str,
    action: str,
    **context: Any,
) -> None:
    """Run `step` now and every `interval` seconds until `stop` is set.

    A step that raises is logged with `failure` and `action` and tried again at the next
    tick: these loops report on the service and must never stop it. Only the error's type
    is logged, since a database error's text can carry connection details.
    """
    while not stop.is_set():
        try:
            await step()
        except Exception as exc:
            log.warning(failure, action=action, error=type(exc).__name__, **context)
        await wait_for_stop(stop, interval)
