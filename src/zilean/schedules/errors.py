"""The one error every schedule parser raises."""

from __future__ import annotations

from zilean.errors import InvalidInput


class ScheduleError(InvalidInput, ValueError):
    """The schedule definition is invalid.

    The message names the offending field (`cron_expression: ...`) and is written for
    the person who typed it: it becomes the body of a 400 response unchanged.
    """

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail
