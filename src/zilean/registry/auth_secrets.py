"""A job's HTTP auth: the non-secret fields stay readable, the secret is sealed at rest.

`token` (bearer), `password` (basic) and `api_key` (api_key) are encrypted with the
master key, bound to the job id, and never returned; responses say `has_auth_secret`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from zilean.crypto.contexts import auth_context
from zilean.crypto.secretbox import SecretBox
from zilean.errors import InvalidInput
from zilean.registry.kinds import AuthType

SECRET_FIELD: dict[AuthType, str] = {
    AuthType.BEARER: "token",
    AuthType.BASIC: "password",
    AuthType.API_KEY: "api_key",
}
PUBLIC_FIELDS: dict[AuthType, tuple[str, ...]] = {
    AuthType.NONE: (),
    AuthType.BEARER: (),
    AuthType.BASIC: ("username",),
    AuthType.API_KEY: ("header_name",),
}
DEFAULT_API_KEY_HEADER = "X-API-Key"
# RFC 9110 token characters; `{{...}}` templates are allowed on top.
_HEADER_NAME = re.compile(r"^(?:[!#$%&'*+.^_`|~0-9A-Za-z-]|\{\{[^}]*\}\})+$")


@dataclass(frozen=True)
class StoredAuth:
    auth_type: AuthType
    secret: bytes | None


def parse_auth_type(value: str) -> AuthType:
    try:
        return AuthType(value)
    except ValueError:
        choices = ", ".join(AuthType)
        raise InvalidInput(f"auth_type: must be one of {choices} (got {value!r})") from None


def _text(config: dict[str, Any], key: str) -> str:
    value = config.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"auth_config.{key}: must be a string")
    return value


def prepare_auth(
    auth_type: AuthType,
    config: dict[str, Any],
    *,
    job_id: uuid.UUID,
    stored: StoredAuth | None,
    box: SecretBox,
) -> tuple[dict[str, str], bytes | None]:
    """Validate `auth_config` for its type; return (public fields, sealed secret or None).

    An empty secret keeps the stored one when the auth type is unchanged (a `PUT` need not
    resend it); on create, or after a type change, there is nothing to keep.
    """
    if auth_type is AuthType.NONE:
        return {}, None
    public: dict[str, str] = {}
    if auth_type is AuthType.BASIC:
        username = _text(config, "username")
        if not username:
            raise InvalidInput("auth_config.username is required for basic auth")
        public["username"] = username
    if auth_type is AuthType.API_KEY:
        header = _text(config, "header_name").strip() or DEFAULT_API_KEY_HEADER
        if not _HEADER_NAME.match(header):
            raise InvalidInput("auth_config.header_name: must be a valid HTTP header name")
        public["header_name"] = header
    field = SECRET_FIELD[auth_type]
    secret = _text(config, field)
    if secret:
        return public, box.seal(secret, auth_context(job_id))
    if stored is not None and stored.auth_type is auth_type and stored.secret is not None:
        return public, stored.secret
    if auth_type is AuthType.BASIC:
        return public, None  # an empty password is allowed
    raise InvalidInput(f"auth_config.{field} is required for {auth_type} auth")
