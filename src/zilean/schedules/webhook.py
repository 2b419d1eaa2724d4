"""Webhook schedules: fired only by an inbound POST, never by the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class WebhookSchedule:
    """Never fire on time; the webhook endpoint is the only trigger."""

    def next_fire(self, after: datetime) -> datetime | None:
        """Return None: there is no time-based next fire."""
        return None
