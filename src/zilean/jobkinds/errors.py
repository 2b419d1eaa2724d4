"""Errors an attempt raises, carrying their retry meaning with them."""

from __future__ import annotations


class CallError(Exception):
    """the call failed"""

    permanent: bool = False

    def __init__(
        self,
        message: str | None = None,
        *,
        permanent: bool | None = None,
        status_code: int | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        if permanent is not None:
            self.permanent = permanent
        self.status_code = status_code  # the response's status, when one arrived
        self.retry_after = retry_after  # the response's Retry-After header, verbatim

    @property
    def message(self) -> str:
        return str(self)


class PermanentCallError(CallError):
    """the job is misconfigured and can never succeed; the attempt is cancelled, not retried"""

    permanent = True
