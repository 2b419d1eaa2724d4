"""One DATABASE_URL, spelled for each client that needs it."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

_SCHEMES = ("postgres", "postgresql", "postgresql+psycopg")


def _with_scheme(url: str, scheme: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ValueError(f"not a Postgres URL (scheme {parts.scheme!r})")
    return urlunsplit((scheme, *parts[1:]))


def sqlalchemy_url(url: str) -> str:
    """Return the URL SQLAlchemy needs to use the psycopg 3 driver."""
    return _with_scheme(url, "postgresql+psycopg")


def libpq_url(url: str) -> str:
    """Return a URL libpq (psycopg) accepts as conninfo."""
    return _with_scheme(url, "postgresql")


def with_database(url: str, database: str) -> str:
    """Return the same server URL pointing at another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


def redacted(url: str) -> str:
    """Return the URL with any password replaced, for logs."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit((parts.scheme, netloc, *parts[2:]))
    return url
