"""The notification event kinds and the target filter rules, shared by workers and core."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class EventKind(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    RETRY_EXHAUSTED = "retry_exhausted"
    INVOCATION_ALARM = "invocation_alarm"
    # Beyond the spec: what used to end silently. Opt-in on every target.
    LOOP_CAPPED = "loop_capped"
    FIRING_SKIPPED = "firing_skipped"


class TargetKind(StrEnum):
    APPRISE = "apprise"
    EMAIL = "email"
    WEBHOOK = "webhook"


# What an empty filter stands for (and is stored as): the four events the spec names.
DEFAULT_EVENTS: tuple[EventKind, ...] = (
    EventKind.SUCCESS,
    EventKind.FAILURE,
    EventKind.RETRY_EXHAUSTED,
    EventKind.INVOCATION_ALARM,
)
RUN_END_EVENTS = frozenset({EventKind.SUCCESS, EventKind.FAILURE, EventKind.RETRY_EXHAUSTED})
FAILURE_EVENTS = frozenset({EventKind.FAILURE, EventKind.RETRY_EXHAUSTED})


def stored_filter(events: Iterable[str]) -> list[str]:
    """The filter as stored: the chosen kinds in a fixed order, or all four spec events."""
    chosen = {EventKind(event) for event in events}
    if not chosen:
        return [str(kind) for kind in DEFAULT_EVENTS]
    return [str(kind) for kind in EventKind if kind in chosen]


def accepts(events: Iterable[str], event: EventKind, *, recovery: bool = False) -> bool:
    """Whether a target with this filter receives `event`.

    `failure` implies `retry_exhausted` (the job-level `notify_on: failure` gate covers
    both). A recovery is a success that ends a notified failure streak: it reaches
    targets subscribed to either side, so whoever heard of the failure hears it is over.
    """
    chosen = {str(item) for item in events} or {str(kind) for kind in DEFAULT_EVENTS}
    if EventKind.FAILURE in chosen:
        chosen.add(EventKind.RETRY_EXHAUSTED)
    if recovery:
        return bool(chosen & {EventKind.SUCCESS, EventKind.FAILURE})
    return str(event) in chosen
