from __future__ import annotations

import base64

import bcrypt
import pytest

from zilean.auth.passwords import hash_password, verify_password
from zilean.crypto.keys import derive_script_key, generate_master_key


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        # Both vectors computed with `openssl kdf ... HKDF` as the spec documents it.
        (bytes(32), "B+QBtE2SQkrPyLGUmcRjMEZckV9MIKVMHHx/WbZ3oA0="),
        (bytes(range(32)), "xP6keDtsZu5E0w3Ogw2uHI+qo1RExrYyDeL3PqX3IdM="),
    ],
)
def test_the_script_key_matches_the_openssl_derivation(master: bytes, expected: str) -> None:
    assert base64.b64encode(derive_script_key(master)).decode() == expected


def test_generated_master_keys_are_32_random_bytes() -> None:
    first, second = generate_master_key(), generate_master_key()
    assert len(base64.b64decode(first)) == 32
    assert first != second


def test_passwords_hash_at_cost_ten_and_verify() -> None:
    hashed = hash_password("correct horse")
    assert hashed.startswith("$2b$10$")
    assert verify_password("correct horse", hashed)
    assert not verify_password("wrong horse", hashed)


def test_htpasswd_style_2y_hashes_verify() -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    assert verify_password("s3cret", "$2y$" + hashed[4:])
