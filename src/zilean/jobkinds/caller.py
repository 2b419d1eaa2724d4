"""What every job kind's caller gives the shared attempt lifecycle.

`execution/attempt.py` reads the job, decides loop or retry, records and releases; a
caller only makes the call. The lifecycle never looks inside: it reads the error, the
loop signal (an HTTP body, a script's stdout), and the kind's own `last_call` fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from zilean.execution.payload import AttemptArgs
from zilean.execution.recording import LoadedJob
from zilean.jobkinds.errors import CallError


@dataclass(frozen=True)
class CallResult:
    """One call's outcome. `error` None is a success.

    Every text in it is already redacted, once, where it was made: a second pass could
    find a short secret inside `REDACTED`.
    """

    error: CallError | None
    duration_ms: int | None  # None when no call was made, or its length is unknown
    kind_fields: Mapping[str, Any] = field(default_factory=dict)  # the kind's `last_call`
    loop_signal: bytes = b""  # what `loop_response_path` is read from, after a success
    status_code: int | None = None  # an HTTP status, for the log and the failure callback


class Caller(Protocol):
    """Makes one attempt's call for the job kinds a worker runs."""

    @property
    def no_call(self) -> Mapping[str, Any]:
        """The kind's `last_call` fields for an attempt that made no call (lost, given up)."""
        ...

    def timeout_ms(self, row: Mapping[str, Any]) -> int:
        """The timeout the call runs under, as `last_call` reports it."""
        ...

    async def call(self, loaded: LoadedJob, args: AttemptArgs) -> CallResult: ...
