"""Secrets at rest: AES-256-GCM with a random nonce and the row's identity as associated data.

Binding each ciphertext to what it belongs to (for example `job-auth:<job id>`) means a
ciphertext copied into another row does not decrypt there.

The cipher (and the `cryptography` library, 6 MiB or more resident) is loaded on first
use: a worker whose jobs hold no secrets never needs it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from zilean.errors import Conflict

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = b"\x01"  # format marker, so a future key rotation can tell blobs apart
NONCE_BYTES = 12


class SecretUnreadable(Conflict):
    """a stored secret cannot be decrypted with the current key (was it rotated?); enter it again"""


class SecretBox:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a SecretBox key is 32 bytes")
        self._key = key
        self._cipher: AESGCM | None = None

    @property
    def _aead(self) -> AESGCM:
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._key)
        return self._cipher

    def seal(self, plaintext: str, context: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext.encode("utf-8"), context.encode("utf-8"))
        return VERSION + nonce + sealed

    def open(self, blob: bytes, context: str) -> str:
        if not blob.startswith(VERSION) or len(blob) < 1 + NONCE_BYTES + 16:
            raise SecretUnreadable()
        nonce, sealed = blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :]
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(nonce, sealed, context.encode("utf-8")).decode("utf-8")
        except (InvalidTag, UnicodeDecodeError):
            raise SecretUnreadable() from None
