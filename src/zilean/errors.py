"""The small error hierarchy shared by every service."""

from __future__ import annotations


class ZileanError(Exception):
    """Something went wrong in Zilean."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(ZileanError):
    """The environment holds a value this service cannot start with."""


class SchemaError(ZileanError):
    """The database schema is missing, newer than this code, or half-applied."""


class DatabaseUnavailable(ZileanError):
    """The database could not be reached."""


# Postgres refused a value (e.g. a NUL character in text); the request changed nothing.
UNSTORABLE_MESSAGE = "a value in the request cannot be stored (invalid characters?)"


class ApiError(ZileanError):
    """The request cannot be carried out."""

    status_code = 400


class InvalidInput(ApiError):
    """The request is malformed or holds an invalid value."""

    status_code = 400


class PermissionDenied(ApiError):
    """you do not have permission to perform this action"""

    status_code = 403


class NotFound(ApiError):
    """not found"""

    status_code = 404


class Conflict(ApiError):
    """The request conflicts with the current state."""

    status_code = 409


class BadGateway(ApiError):
    """The upstream service (an SMTP relay, a notification target) refused or failed."""

    status_code = 502
