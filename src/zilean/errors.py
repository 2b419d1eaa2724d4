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
