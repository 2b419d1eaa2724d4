"""Random secrets and their digests: sessions, invites, API tokens and CSRF all use these.

Only the SHA-256 digest of a token is ever stored; the raw value exists in a response
or a cookie and nowhere else.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_BYTES = 32


def new_token(prefix: str = "") -> str:
    return prefix + secrets.token_urlsafe(TOKEN_BYTES)


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


# Passwords readable aloud: no i, l, 1, O or 0.
TEMP_PASSWORD_ALPHABET = "abcdefghjkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # noqa: S105
TEMP_PASSWORD_LENGTH = 20


def temporary_password() -> str:
    return "".join(secrets.choice(TEMP_PASSWORD_ALPHABET) for _ in range(TEMP_PASSWORD_LENGTH))
