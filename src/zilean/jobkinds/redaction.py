"""Redaction of what Zilean records about a call: secrets become `REDACTED`.

Only recorded copies (error text, the `last_call` URL and response snippet, notifications)
pass through here; the request itself carries the real values.

Rules:
- Each secret is matched in the forms it is likely to appear in a record: as written,
  percent-encoded (as in a query string, either `%20` or `+` for a space) and JSON-escaped
  (as echoed inside a JSON response).
- Every secret counts, however short: a one-character secret shreds the record, but a
  record that shows a credential, even a weak one, is the worse failure.
- Longer secrets win where secrets overlap, and replacement is one pass, so a secret that
  happens to occur inside `REDACTED` cannot mangle an earlier replacement. Redact each
  piece of recorded text once: a second pass could find a short secret inside `REDACTED`.
- The password of any `scheme://user:password@` URL in the text is redacted as well,
  whether or not it is a known secret.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "REDACTED"

_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*):(?P<password>[^\s/?#@]+)@"
)


def _forms(secret: str) -> set[str]:
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }


def _longest_first(secrets: frozenset[str]) -> tuple[str, ...]:
    forms = set().union(*(_forms(secret) for secret in secrets if secret))
    return tuple(sorted(forms, key=lambda form: (-len(form), form)))


# Compiling costs milliseconds per set (Python's regex compiler is slow), so a pattern is
# built only for the set every job shares (the secret global variables); a request's own
# credentials are looked for with `str.find`.
@functools.lru_cache(maxsize=16)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    forms = _longest_first(secrets)
    if not forms:
        return None
    # Alternation tries branches in order, so longest first makes the longest match win.
    return re.compile("|".join(re.escape(form) for form in forms))


@functools.lru_cache(maxsize=1024)
def _own_forms(secrets: frozenset[str]) -> tuple[str, ...]:
    return _longest_first(secrets)


class Secrets:
    """The values a record of one call must not show.

    `shared` holds what every call of the worker shares (every secret global variable's
    value), `own` what belongs to this call (its resolved auth credentials, a URL
    password). The split is only for speed; both are redacted alike.
    """

    __slots__ = ("own", "shared")

    def __init__(self, shared: Iterable[str] = (), own: Iterable[str] = ()) -> None:
        self.shared = frozenset(value for value in shared if value)
        self.own = frozenset(value for value in own if value) - self.shared

    def __repr__(self) -> str:  # never the values themselves
        return f"Secrets({len(self.shared)} shared, {len(self.own)} own)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secrets) and self.values == other.values

    def __hash__(self) -> int:
        return hash(self.values)

    @property
    def values(self) -> frozenset[str]:
        """Every secret, shared or own."""
        return self.shared | self.own

    def adding(self, *values: str) -> Secrets:
        """Return these secrets with `values` added to the call's own."""
        return Secrets(self.shared, self.own.union(values))

    def longest_form(self) -> int:
        """Return the length of the longest text `redact` may replace for these secrets."""
        return max((len(form) for value in self.values for form in _forms(value)), default=0)

    def redact(self, text: str) -> str:
        """Return `text` with every secret (see the module rules) replaced by `REDACTED`."""
        pattern = _pattern(self.shared)
        own = _own_forms(self.own)
        if own:
            text = _replace(text, pattern, own)
        elif pattern is not None:
            text = pattern.sub(REDACTED, text)
        return _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", text)


NO_SECRETS = Secrets()


def _replace(text: str, pattern: re.Pattern[str] | None, own: tuple[str, ...]) -> str:
    """One pass over `text`: at each point the leftmost match of either source, and of
    those starting there the longest, is replaced; the search resumes after it."""
    pieces: list[str] = []
    position = 0
    while True:
        start, end = -1, -1
        if pattern is not None and (match := pattern.search(text, position)):
            start, end = match.span()
        for form in own:  # longest first: a later one wins only by starting earlier
            found = text.find(form, position)
            if found >= 0 and (start < 0 or found < start):
                start, end = found, found + len(form)
            elif found == start >= 0 and found + len(form) > end:
                end = found + len(form)
        if start < 0:
            break
        pieces += (text[position:start], REDACTED)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def redact(text: str, secrets: Iterable[str] | Secrets) -> str:
    """Return `text` with every secret (see the module rules) replaced by `REDACTED`."""
    if not isinstance(secrets, Secrets):
        secrets = Secrets(own=secrets)
    return secrets.redact(text)
