"""Master key generation and the derivation of the script workers' sub-key."""

from __future__ import annotations

import base64
import secrets

from zilean.config import KEY_BYTES

SCRIPT_KEY_SALT = b"zilean-script-secrets-v1"
SCRIPT_KEY_INFO = b"zilean-script-secrets"


def generate_master_key() -> str:
    """Return a fresh `SETTINGS_ENCRYPTION_KEY`: 32 random bytes, base64."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def derive_script_key(master_key: bytes) -> bytes:
    """Derive `SCRIPT_SECRETS_KEY` from the decoded master key (HKDF-SHA256).

    The derivation is deterministic, so rotating the master key means deriving
    the script key again. (`cryptography` is imported here: every service process
    imports this module through the CLI, and most never derive a key.)
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    hkdf = HKDF(
        algorithm=hashes.SHA256(), length=KEY_BYTES, salt=SCRIPT_KEY_SALT, info=SCRIPT_KEY_INFO
    )
    return hkdf.derive(master_key)


def encode_key(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")
