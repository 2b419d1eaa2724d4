"""Password hashing: bcrypt at cost 10, the cost the spec's `htpasswd -bnBC 10` produces."""

from __future__ import annotations

import bcrypt

BCRYPT_COST = 10
# bcrypt only reads the first 72 bytes; longer inputs are refused rather than truncated.
MAX_PASSWORD_BYTES = 72


def hash_password(password: str) -> str:
    data = password.encode("utf-8")
    if len(data) > MAX_PASSWORD_BYTES:
        raise ValueError(f"passwords are limited to {MAX_PASSWORD_BYTES} bytes")
    return bcrypt.hashpw(data, bcrypt.gensalt(rounds=BCRYPT_COST)).decode("ascii")


def verify_password(password: str, password_hash: str) -> bool:
    """Check a password against a `$2a$`, `$2b$` or `$2y$` hash."""
    data = password.encode("utf-8")
    if len(data) > MAX_PASSWORD_BYTES:
        return False
    stored = password_hash.encode("ascii")
    if stored.startswith(b"$2y$"):
        # htpasswd writes $2y$; it is the same algorithm as $2b$.
        stored = b"$2b$" + stored[4:]
    try:
        return bcrypt.checkpw(data, stored)
    except ValueError:
        return False
