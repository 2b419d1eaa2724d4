"""Turn a `scheduled_jobs` row into the exact HTTP request one attempt sends.

The order matters because later steps win: method, query params, URL, body, headers,
`Content-Type`, auth, then the webhook hop header. Every text field goes through
`{{name}}` substitution first. A job that cannot produce a valid request raises
`PermanentCallError`: retrying would fail the same way, so the attempt is cancelled.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_plus, urlencode, urlsplit, urlunsplit

import idna
from yarl import URL

from zilean.crypto.contexts import auth_context
from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.jobkinds.errors import PermanentCallError
from zilean.jobkinds.http.template import substitute
from zilean.jobkinds.redaction import Secrets
from zilean.registry.auth_secrets import DEFAULT_API_KEY_HEADER
from zilean.registry.kinds import AuthType

WEBHOOK_HOPS_HEADER = "X-Zilean-Webhook-Hops"
POOL_INDEX_PARAM = "pool_idx"
ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_METHOD = "GET"

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 method and header names
_BAD_HEADER_VALUE = re.compile(r"[\r\n\x00]")

# The columns of a job's row `build_request` reads (its auth secret comes opened, apart).
REQUEST_COLUMNS = (
    "http_method", "url", "query_params", "pool_count", "body", "headers", "auth_type",
    "auth_config",
)  # fmt: skip

MAX_URL_LENGTH = 65_536  # characters
DEFAULT_PORTS = {"http": 80, "https": 443}
_IPV4_STYLE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # ASCII that is not printable
_UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
_SUB_DELIMS = "!$&'()*+,;="
# Characters each part keeps as written (the WHATWG percent-encode sets, as httpx had
# them); anything else (space, quotes, angle brackets, non-ASCII) is encoded as UTF-8.
_QUERY_SAFE = _UNRESERVED + "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>')
_PATH_SAFE = "".join(c for c in _QUERY_SAFE if c not in "?`{}")
_USERINFO_SAFE = "".join(c for c in _PATH_SAFE if c not in "/;=@[\\]^|")
_HOST_SAFE = _UNRESERVED + _SUB_DELIMS + '"`{}%|\\'


@dataclass(frozen=True)
class HttpRequestSpec:
    """A fully resolved request, plus the values that must never appear in a record.

    Never changed once built: the caller keeps it for the job's next attempts.
    """

    method: str
    url: str
    headers: list[tuple[str, str]] = field(repr=False)
    body: bytes | None = field(repr=False)
    secrets: Secrets = field(repr=False)

    def __repr__(self) -> str:  # a spec that ends up in a log line must not leak
        return f"HttpRequestSpec({self.method} {self.secrets.redact(self.url)})"

    def header(self, name: str) -> str | None:
        """Return the last value of header `name` (case-insensitive), or None."""
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return values[-1] if values else None


class _Resolver:
    """Substitutes variables, and collects what the request's records must not show."""

    def __init__(self, variables: Mapping[str, str], secret_values: Iterable[str]) -> None:
        self._variables = variables
        self.secrets = Secrets(shared=secret_values)

    def __call__(self, text: str) -> str:
        return substitute(text, self._variables)

    def credential(self, *values: str) -> None:
        """Mark resolved credentials (auth values, a URL password) for redaction."""
        self.secrets = self.secrets.adding(*values)

    def fail(self, message: str) -> PermanentCallError:
        return PermanentCallError(self.secrets.redact(message))


def build_request(
    job: Mapping[str, Any],
    *,
    variables: Mapping[str, str],
    secret_values: Iterable[str],
    auth_secret: str | None,
    pool_index: int,
    webhook_hops: int | None,
) -> HttpRequestSpec:
    """Build the request for one attempt of the HTTP job `job` (a `scheduled_jobs` row).

    `variables` maps the global variable names the job references to their plaintext;
    `secret_values` are the plaintexts of every secret global variable, referenced or
    not: the spec's `secrets` holds them and the resolved auth credentials, for
    redaction. `auth_secret` is the job's decrypted auth secret, if it has one.
    `webhook_hops` is the incoming hop count of a webhook-triggered run, None otherwise.

    Raise `PermanentCallError` for a URL that is not a valid http(s) URL after
    substitution, an unknown auth type, a missing required auth field, or a method or
    header that cannot be sent.
    """
    resolve = _Resolver(variables, secret_values)
    # Resolved before anything else, so that no error message can carry it.
    credential = resolve(auth_secret or "")
    resolve.credential(credential)

    method = _text(job.get("http_method")).strip().upper() or DEFAULT_METHOD
    if not _TOKEN.match(method):
        raise resolve.fail(f"http_method {method!r} is not a valid HTTP method")

    params: dict[str, str] = {}
    for key, value in _mapping(job.get("query_params")).items():
        params[resolve(str(key))] = resolve(_text(value))
    if int(job.get("pool_count") or 1) > 1:
        # Pooled calls tell the target which member they are; this beats the user's own.
        params.pop(POOL_INDEX_PARAM, None)
        params[POOL_INDEX_PARAM] = str(pool_index)

    url = _check_url(resolve(_text(job.get("url")).strip()), resolve)
    if params:
        url = _check_url(_merge_query(url, params), resolve)

    body = _body(job.get("body"), resolve)

    headers = [
        (resolve(str(key)), resolve(_text(value)))
        for key, value in _mapping(job.get("headers")).items()
    ]
    if body is not None and not any(key.lower() == "content-type" for key, _ in headers):
        headers.append(("Content-Type", "application/json"))

    _apply_auth(job, headers, credential, resolve)

    # Loop protection comes last so that no header or auth setting can reset the count.
    hops = 1 if webhook_hops is None else webhook_hops + 1
    _set_header(headers, WEBHOOK_HOPS_HEADER, str(hops))

    _check_headers(headers, resolve)
    return HttpRequestSpec(
        method=method, url=url, headers=headers, body=body, secrets=resolve.secrets
    )


def open_auth_secret(job: Mapping[str, Any], box: SecretBox) -> str | None:
    """Decrypt the job's sealed auth secret, or return None when it has none.

    Raise `PermanentCallError` when the secret cannot be decrypted (a rotated key, or a
    ciphertext copied from another row): the job needs its secret entered again.
    """
    blob = job.get("auth_secret")
    if blob is None:
        return None
    job_id = job["id"] if isinstance(job["id"], uuid.UUID) else uuid.UUID(str(job["id"]))
    try:
        return box.open(bytes(blob), auth_context(job_id))
    except SecretUnreadable as exc:
        raise PermanentCallError(
            "the job's auth secret cannot be decrypted with the current key; enter it again"
        ) from exc


def _text(value: Any) -> str:
    """Read a stored text field; tolerate a non-string JSON value by serialising it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):  # a JSON column read back as text
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise PermanentCallError("query_params and headers must be JSON objects") from None
    if not isinstance(value, Mapping):
        raise PermanentCallError("query_params and headers must be JSON objects")
    return value


def _body(raw: Any, resolve: _Resolver) -> bytes | None:
    # The stored body is JSON text; substitution works on that text, unescaped, and
    # the result is sent as is, byte for byte (it need not stay valid JSON). A JSON value
    # read back from a JSON column keeps its non-ASCII characters as they are.
    if raw is None:
        return None
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    return resolve(text).encode("utf-8")


@functools.lru_cache(maxsize=1024)
def wire_url(url: str) -> URL:
    """Return `url` the way the request line and `Host` header carry it.

    These are the rules the worker's previous client (httpx) applied, kept so that a
    job's request did not change with the client: scheme and host lowercased, a
    non-ASCII host IDNA-encoded, the default port dropped, `.` and `..` path segments
    resolved, characters a request line cannot carry percent-encoded as UTF-8, and
    existing `%xx` escapes (and a stray `%`) left exactly as written. The fragment is
    never sent; userinfo stays in the URL for the caller to turn into basic auth. A
    trailing `?` with an empty query is not sent (aiohttp cannot express it).

    Raise ValueError for a URL that cannot be sent: a control character, a bad port, an
    invalid IP address or IDNA host, or one aiohttp's URL type rejects. Results are
    cached: a job sends the same URL attempt after attempt.
    """
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"URL longer than {MAX_URL_LENGTH} characters")
    # Checked before urlsplit, which would silently drop a tab or a line break.
    if control := _CONTROL.search(url):
        raise ValueError(
            f"non-printable character {control.group()!r} at position {control.start()}"
        )
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port  # raises ValueError for a port that is not a number in range
    netloc = ""
    if parts.netloc:
        userinfo, at, _ = parts.netloc.rpartition("@")
        netloc = _quote(userinfo, _USERINFO_SAFE) + at + _wire_host(parts.hostname or "")
        if port is not None and port != DEFAULT_PORTS.get(scheme):
            netloc += f":{port}"
    path = _quote(_resolve_dot_segments(parts.path), _PATH_SAFE)
    query = f"?{_quote(parts.query, _QUERY_SAFE)}" if parts.query else ""
    prefix = (f"{scheme}:" if scheme else "") + ("//" if parts.netloc else "")
    return URL(f"{prefix}{netloc}{path}{query}", encoded=True)


def _wire_host(host: str) -> str:
    if ":" in host:  # urlsplit has already taken the brackets off an IPv6 literal
        ipaddress.IPv6Address(host)
        return f"[{host}]"
    if _IPV4_STYLE.match(host):
        ipaddress.IPv4Address(host)
        return host
    if host.isascii():
        return _quote(host, _HOST_SAFE)
    return idna.encode(host).decode("ascii")


def _resolve_dot_segments(path: str) -> str:
    if "." not in path:
        return path
    segments = path.split("/")
    if "." not in segments and ".." not in segments:
        return path
    kept: list[str] = []
    for segment in segments:
        if segment == "..":
            if kept and kept != [""]:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    return "/".join(kept)


def _quote(text: str, safe: str) -> str:
    """Percent-encode every character `safe` lacks; `%` is safe, so escapes stay as written."""
    if not text.strip(safe):
        return text
    return "".join(
        char if char in safe else "".join(f"%{byte:02X}" for byte in char.encode()) for char in text
    )


def _check_url(url: str, resolve: _Resolver) -> str:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number in range
        wire_url(url)
    except ValueError as exc:
        raise resolve.fail(f"url {url!r} is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in ALLOWED_SCHEMES or not parts.hostname:
        raise resolve.fail(f"url {url!r} is not an absolute http or https URL")
    if parts.password:  # URL userinfo is sent as basic auth: the password is a credential
        resolve.credential(parts.password, unquote(parts.password))
    return url


def _merge_query(url: str, params: Mapping[str, str]) -> str:
    """Add `params` to the URL's query, replacing same-named ones already there.

    Parameters that are not replaced keep their original spelling and order.
    """
    parts = urlsplit(url)
    kept = [
        segment
        for segment in parts.query.split("&")
        if segment and unquote_plus(segment.split("=", 1)[0]) not in params
    ]
    query = "&".join([*kept, urlencode(list(params.items()))])
    return urlunsplit(parts._replace(query=query))


def _set_header(headers: list[tuple[str, str]], name: str, value: str) -> None:
    """Replace every header called `name` (case-insensitive) with one `name: value`."""
    headers[:] = [(key, old) for key, old in headers if key.lower() != name.lower()]
    headers.append((name, value))


def _apply_auth(
    job: Mapping[str, Any],
    headers: list[tuple[str, str]],
    secret: str,
    resolve: _Resolver,
) -> None:
    """Set the auth header; `secret` is the resolved auth secret (already a credential)."""
    raw = _text(job.get("auth_type")).strip() or AuthType.NONE
    try:
        auth_type = AuthType(raw.lower())
    except ValueError:
        raise resolve.fail(f"unknown auth_type {raw!r}") from None
    if auth_type is AuthType.NONE:
        return
    config = _mapping(job.get("auth_config"))
    if auth_type is AuthType.BEARER:
        if not secret:
            raise resolve.fail("auth_config.token is required for bearer auth")
        _set_header(headers, "Authorization", f"Bearer {secret}")
    elif auth_type is AuthType.BASIC:
        username = resolve(_text(config.get("username")))
        if not username:
            raise resolve.fail("auth_config.username is required for basic auth")
        pair = base64.b64encode(f"{username}:{secret}".encode()).decode("ascii")
        resolve.credential(pair)
        _set_header(headers, "Authorization", f"Basic {pair}")
    else:
        name = resolve(_text(config.get("header_name"))).strip() or DEFAULT_API_KEY_HEADER
        if not secret:
            raise resolve.fail("auth_config.api_key is required for api_key auth")
        _set_header(headers, name, secret)


def _check_headers(headers: list[tuple[str, str]], resolve: _Resolver) -> None:
    for name, value in headers:
        if not _TOKEN.match(name):
            raise resolve.fail(f"header name {name!r} is not a valid HTTP header name")
        if _BAD_HEADER_VALUE.search(value):
            raise resolve.fail(f"header {name} has a line break or NUL in its value")
