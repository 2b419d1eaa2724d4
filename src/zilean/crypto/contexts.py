"""The associated data that binds each sealed secret to the row it belongs to.

A ciphertext opened with another row's context fails, so a secret copied to another
row (by hand, in SQL) cannot be read there. The workers need these on every attempt,
without the registry services (and SQLAlchemy) that write the secrets.
"""

from __future__ import annotations

import uuid


def auth_context(job_id: uuid.UUID) -> str:
    """A job's HTTP auth secret (bearer token, basic password or API key)."""
    return f"job-auth:{job_id}"


def secret_context(variable_id: uuid.UUID) -> str:
    """A secret global variable's copy under the master key."""
    return f"globalvar:{variable_id}"


def script_context(variable_id: uuid.UUID) -> str:
    """A secret global variable's copy under the script key."""
    return f"globalvar-script:{variable_id}"
