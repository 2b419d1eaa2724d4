"""Redaction of what Zilean records about a call: secrets become `REDACTED`.

Only recorded copies (error text, the `last_call` URL and response snippet, notifications)
pass through here; the request itself carries the real values.

Rules:
- Each secret is matched in the forms it is likely to appear in a record: as written,
  percent-encoded (as in a query string, either `%20` or `+` for a space) and JSON-escaped
  (as echoed inside a JSON response).
- Longer secrets win where secrets overlap, and replacement is one pass, so a secret that
  happens to occur inside `REDACTED` cannot mangle an earlier replacement.
- Secrets shorter than `MIN_SECRET_LENGTH` are not redacted. Replacing every occurrence of
  a one- or two-character value would shred the record, and the pattern of replacements
  would reveal the value anyway. Credentials that short offer no protection to begin with.
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
MIN_SECRET_LENGTH = 4  # characters

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


@functools.lru_cache(maxsize=256)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    forms: set[str] = set()
    for secret in secrets:
        if len(secret) >= MIN_SECRET_LENGTH:
            forms |= _forms(secret)
    if not forms:
        return None
    # Alternation tries branches in order, so longest first makes the longest match win.
    ordered = sorted(forms, key=lambda form: (-len(form), form))
    return re.compile("|".join(re.escape(form) for form in ordered))


def redact(text: str, secrets: Iterable[str]) -> str:
    """Return `text` with every secret (see the module rules) replaced by `REDACTED`."""
    pattern = _pattern(frozenset(secrets))
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    return _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", text)


def longest_form(secrets: Iterable[str]) -> int:
    """Return the length of the longest text `redact` may replace for these secrets."""
    return max((len(form) for secret in secrets for form in _forms(secret)), default=0)
