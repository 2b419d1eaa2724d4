"""build_request's rules, one table per step of the request, and redaction of records."""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

import pytest

from zilean.crypto.contexts import auth_context
from zilean.crypto.secretbox import SecretBox
from zilean.jobkinds.errors import CallError, PermanentCallError
from zilean.jobkinds.http.call import SNIPPET_CHARS, snippet
from zilean.jobkinds.http.request import (
    HttpRequestSpec,
    build_request,
    open_auth_secret,
    wire_url,
)
from zilean.jobkinds.http.template import references, substitute
from zilean.jobkinds.redaction import NO_SECRETS, REDACTED, Secrets, redact

TOKEN = "tok-secret-123"
PASSWORD = "pw-secret-456"
API_KEY = "key-secret-789"
VARIABLES = {
    "HOST": "api.example.com",
    "REGION": "eu",
    "USER": "alice",
    "HEADER": "X-Custom-Key",
    "TOKEN": TOKEN,
    "PASS": PASSWORD,
    "KEY": API_KEY,
    "BROKEN": "line\r\nbreak",
}
SECRET_VALUES = {TOKEN, PASSWORD, API_KEY}


def job_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": uuid.uuid4(),
        "http_method": "GET",
        "url": "https://api.example.com/run",
        "query_params": {},
        "body": None,
        "headers": {},
        "auth_type": "none",
        "auth_config": {},
        "auth_secret": None,
        "pool_count": 1,
    }
    row.update(overrides)
    return row


def build(
    *,
    auth_secret: str | None = None,
    pool_index: int = 0,
    webhook_hops: int | None = None,
    **overrides: Any,
) -> HttpRequestSpec:
    return build_request(
        job_row(**overrides),
        variables=VARIABLES,
        secret_values=SECRET_VALUES,
        auth_secret=auth_secret,
        pool_index=pool_index,
        webhook_hops=webhook_hops,
    )


def named(spec: HttpRequestSpec, name: str) -> list[str]:
    return [value for key, value in spec.headers if key.lower() == name.lower()]


# Templates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{REGION}}", "eu"),
        ("{{ REGION }}", "eu"),  # spaces inside the braces
        ("{{\tREGION  }}", "eu"),  # any whitespace
        ("a{{REGION}}b{{USER}}c", "aeubalicec"),  # several in one text
        ("{{MISSING}}", "{{MISSING}}"),  # unresolved stays literal
        ("{{ MISSING }}", "{{ MISSING }}"),  # ... as written, spaces included
        ("{{RE GION}}", "{{RE GION}}"),  # a space inside the name is no name
        ("{{re-gion}}", "{{re-gion}}"),  # names are letters, digits, underscores
        ("{REGION}", "{REGION}"),  # single braces are text
        ("{{{REGION}}}", "{eu}"),  # extra braces stay around the value
        ("no placeholders", "no placeholders"),
    ],
)
def test_it_substitutes_placeholders(text: str, expected: str) -> None:
    assert substitute(text, VARIABLES) == expected


def test_it_does_not_expand_a_value_twice() -> None:
    assert substitute("{{A}}", {"A": "{{B}}", "B": "b"}) == "{{B}}"


def test_it_lists_references_known_or_not() -> None:
    assert references("{{ A }} {{B}} {{A}} {C}") == {"A", "B"}


# Method, URL and query


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"http_method": ""}, "GET"),  # default
        ({"http_method": "post"}, "POST"),  # normalised
        ({"http_method": "DELETE"}, "DELETE"),
    ],
)
def test_it_picks_the_method(overrides: dict[str, Any], expected: str) -> None:
    assert build(**overrides).method == expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # URL substitution, with and without spaces in the braces
        ({"url": "https://{{HOST}}/v1/{{ REGION }}"}, "https://api.example.com/v1/eu"),
        # an unresolved reference stays literal
        ({"url": "https://api.example.com/{{MISSING}}"}, "https://api.example.com/{{MISSING}}"),
        # no params and no pooling: the URL is sent exactly as written
        ({"url": "https://h.example/p?b=2&a=1#top"}, "https://h.example/p?b=2&a=1#top"),
        # query keys and values are substituted
        (
            {"query_params": {"{{REGION}}_key": "{{ USER }}"}},
            "https://api.example.com/run?eu_key=alice",
        ),
        # a param overrides a same-named one in the URL; the others keep their place
        (
            {"url": "https://h.example/p?a=1&b=2&a=3", "query_params": {"a": "9"}},
            "https://h.example/p?b=2&a=9",
        ),
        # a substituted key overrides too
        (
            {"url": "https://h.example/p?eu=old", "query_params": {"{{REGION}}": "new"}},
            "https://h.example/p?eu=new",
        ),
        # added params are encoded
        ({"query_params": {"q": "a b&c"}}, "https://api.example.com/run?q=a+b%26c"),
        # at pool_count 1 a user's own pool_idx is left alone and none is added
        (
            {"url": "https://h.example/p?pool_idx=5", "query_params": {"x": "1"}},
            "https://h.example/p?pool_idx=5&x=1",
        ),
        ({"query_params": {"pool_idx": "7"}}, "https://api.example.com/run?pool_idx=7"),
    ],
)
def test_it_builds_the_url(overrides: dict[str, Any], expected: str) -> None:
    assert build(**overrides).url == expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # pooled: pool_idx is added
        ({"url": "https://h.example/p"}, "https://h.example/p?pool_idx=2"),
        # ... overriding one in the URL
        ({"url": "https://h.example/p?pool_idx=5&x=1"}, "https://h.example/p?x=1&pool_idx=2"),
        # ... and one in query_params
        (
            {"url": "https://h.example/p", "query_params": {"pool_idx": "7", "y": "2"}},
            "https://h.example/p?y=2&pool_idx=2",
        ),
    ],
)
def test_it_adds_pool_idx_only_to_pooled_jobs(overrides: dict[str, Any], expected: str) -> None:
    assert build(pool_count=3, pool_index=2, **overrides).url == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # scheme and host lowercased, the default port dropped, the fragment never sent
        ("HTTP://API.Example.com:80/Run#top", "http://api.example.com/Run"),
        ("https://h.example:443", "https://h.example"),
        ("https://h.example:8443/", "https://h.example:8443/"),
        # existing escapes, and a stray %, are kept exactly as written
        (
            "https://h.example/a%2Fb/%7e?q=%2f&r=a+b&s=%zz%",
            "https://h.example/a%2Fb/%7e?q=%2f&r=a+b&s=%zz%",
        ),
        # what a request line cannot carry is percent-encoded as UTF-8
        ("https://h.example/a b/é?q=a b&t=é", "https://h.example/a%20b/%C3%A9?q=a%20b&t=%C3%A9"),
        # characters a path may not hold but a query may
        ("https://h.example/`{}?`{}|^", "https://h.example/%60%7B%7D?`{}|^"),
        # dot segments resolved, never above the root
        ("https://h.example/a/./b/../../../c", "https://h.example/c"),
        # a non-ASCII host is IDNA-encoded; IPv6 keeps its brackets
        ("https://bücher.example/", "https://xn--bcher-kva.example/"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        # userinfo stays, quoted, for the client to turn into basic auth
        ("https://bob:p w@h.example/", "https://bob:p%20w@h.example/"),
    ],
)
def test_the_wire_url_follows_httpxs_rules(url: str, expected: str) -> None:
    assert str(wire_url(url)) == expected


# Body and Content-Type


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (None, None),
        ('{"region": "{{REGION}}"}', b'{"region": "eu"}'),
        ('{"region":"{{ MISSING }}"}', b'{"region":"{{ MISSING }}"}'),  # unresolved
        ('"caf\\u00e9"', b'"caf\\u00e9"'),  # the stored text is sent verbatim
        ('{"n": {{REGION}}}', b'{"n": eu}'),  # substitution need not keep it JSON
    ],
)
def test_it_sends_the_body_text_after_substitution(
    body: str | None, expected: bytes | None
) -> None:
    assert build(http_method="POST", body=body).body == expected


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        ('{"a": 1}', {}, ["application/json"]),  # a body and no Content-Type
        (None, {}, []),  # no body, none added
        ('{"a": 1}', {"content-type": "text/plain"}, ["text/plain"]),  # the user's wins
        ('{"a": 1}', {"CONTENT-TYPE": "text/csv"}, ["text/csv"]),  # in any case
        (None, {"Content-Type": "text/plain"}, ["text/plain"]),  # kept without a body
    ],
)
def test_it_sets_content_type_only_when_needed(
    body: str | None, headers: dict[str, str], expected: list[str]
) -> None:
    assert named(build(http_method="POST", body=body, headers=headers), "content-type") == expected


# Headers and the webhook hop count


def test_it_substitutes_header_keys_and_values() -> None:
    spec = build(headers={"X-{{REGION}}": "{{ USER }}", "X-Plain": "{{MISSING}}"})
    assert ("X-eu", "alice") in spec.headers
    assert ("X-Plain", "{{MISSING}}") in spec.headers


@pytest.mark.parametrize(
    ("webhook_hops", "headers", "expected"),
    [
        (None, {}, "1"),  # not webhook-triggered
        (0, {}, "1"),  # webhook-triggered by an outside caller
        (4, {}, "5"),  # a chain of webhook jobs
        (None, {"X-Zilean-Webhook-Hops": "99"}, "1"),  # a configured one is replaced
        (2, {"x-zilean-webhook-hops": "0"}, "3"),  # in any case
    ],
)
def test_it_sends_the_hop_count(
    webhook_hops: int | None, headers: dict[str, str], expected: str
) -> None:
    spec = build(webhook_hops=webhook_hops, headers=headers)
    assert named(spec, "X-Zilean-Webhook-Hops") == [expected]


def test_hops_beat_an_api_key_header_of_the_same_name() -> None:
    spec = build(
        auth_type="api_key",
        auth_config={"header_name": "X-Zilean-Webhook-Hops"},
        auth_secret=API_KEY,
    )
    assert named(spec, "x-zilean-webhook-hops") == ["1"]


# Auth


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("overrides", "auth_secret", "header", "expected"),
    [
        ({"auth_type": "none"}, None, "Authorization", []),
        # an auth type of none ignores a leftover secret
        ({"auth_type": "none"}, "stale", "Authorization", []),
        ({"auth_type": "bearer"}, TOKEN, "Authorization", [f"Bearer {TOKEN}"]),
        # the token is substituted
        ({"auth_type": "bearer"}, "{{ TOKEN }}", "Authorization", [f"Bearer {TOKEN}"]),
        # auth overrides a manual header of the same name, in any case
        (
            {"auth_type": "bearer", "headers": {"authorization": "Bearer manual"}},
            TOKEN,
            "Authorization",
            [f"Bearer {TOKEN}"],
        ),
        (
            {"auth_type": "basic", "auth_config": {"username": "alice"}},
            PASSWORD,
            "Authorization",
            [basic("alice", PASSWORD)],
        ),
        # an empty password is allowed
        (
            {"auth_type": "basic", "auth_config": {"username": "alice"}},
            None,
            "Authorization",
            [basic("alice", "")],
        ),
        # username and password are substituted
        (
            {"auth_type": "basic", "auth_config": {"username": "{{USER}}"}},
            "{{PASS}}",
            "Authorization",
            [basic("alice", PASSWORD)],
        ),
        # api_key defaults to X-API-Key
        ({"auth_type": "api_key"}, API_KEY, "X-API-Key", [API_KEY]),
        (
            {"auth_type": "api_key", "auth_config": {"header_name": ""}},
            API_KEY,
            "X-API-Key",
            [API_KEY],
        ),
        # the header name and the key are substituted
        (
            {"auth_type": "api_key", "auth_config": {"header_name": "{{ HEADER }}"}},
            "{{KEY}}",
            "X-Custom-Key",
            [API_KEY],
        ),
        # the key replaces a manual header of that name
        (
            {"auth_type": "api_key", "headers": {"x-api-key": "manual"}},
            API_KEY,
            "X-API-Key",
            [API_KEY],
        ),
    ],
)
def test_it_applies_auth_last(
    overrides: dict[str, Any], auth_secret: str | None, header: str, expected: list[str]
) -> None:
    assert named(build(auth_secret=auth_secret, **overrides), header) == expected


# Configuration errors are permanent


@pytest.mark.parametrize(
    ("overrides", "auth_secret", "message"),
    [
        ({"url": "not a url"}, None, "not an absolute http or https URL"),
        ({"url": "ftp://files.example/x"}, None, "not an absolute http or https URL"),
        ({"url": "https://"}, None, "not an absolute http or https URL"),
        ({"url": "/relative/path"}, None, "not an absolute http or https URL"),
        ({"url": "http://h.example:99999/"}, None, "is not a valid URL"),
        ({"url": "http://[::1/"}, None, "is not a valid URL"),
        ({"url": "http://h.example/a\tb"}, None, "is not a valid URL: non-printable"),
        ({"url": "http://999.1.1.1/"}, None, "is not a valid URL"),
        ({"url": "http://[::zz]/"}, None, "is not a valid URL"),
        ({"url": "http://exa_mple\u00e9.com/"}, None, "is not a valid URL"),  # not valid IDNA
        # an unresolved variable leaves no scheme
        ({"url": "{{BASE_URL}}/run"}, None, "not an absolute http or https URL"),
        ({"auth_type": "oauth"}, "x", "unknown auth_type 'oauth'"),
        ({"auth_type": "bearer"}, None, "auth_config.token is required"),
        ({"auth_type": "bearer"}, "", "auth_config.token is required"),
        ({"auth_type": "basic", "auth_config": {}}, PASSWORD, "auth_config.username is required"),
        ({"auth_type": "api_key"}, None, "auth_config.api_key is required"),
        ({"http_method": "GE T"}, None, "not a valid HTTP method"),
        ({"headers": {"Bad Name": "x"}}, None, "not a valid HTTP header name"),
        ({"headers": {"X-Broken": "{{BROKEN}}"}}, None, "line break"),
    ],
)
def test_configuration_errors_are_permanent(
    overrides: dict[str, Any], auth_secret: str | None, message: str
) -> None:
    with pytest.raises(PermanentCallError, match=message) as caught:
        build(auth_secret=auth_secret, **overrides)
    assert caught.value.permanent


def test_a_permanent_error_message_is_redacted() -> None:
    with pytest.raises(PermanentCallError) as caught:
        build(url="ftp://h.example/{{TOKEN}}")
    assert TOKEN not in str(caught.value)
    assert REDACTED in str(caught.value)


def test_call_errors_carry_their_retry_meaning() -> None:
    assert CallError("x").permanent is False
    assert PermanentCallError("x").permanent is True
    assert str(PermanentCallError()).startswith("the job is misconfigured")
    error = CallError("x", status_code=429, retry_after="7")
    assert (error.status_code, error.retry_after) == (429, "7")


def test_it_opens_the_sealed_auth_secret() -> None:
    box = SecretBox(os.urandom(32))
    row = job_row(auth_type="bearer")
    row["auth_secret"] = box.seal("{{TOKEN}}", auth_context(row["id"]))
    assert open_auth_secret(row, box) == "{{TOKEN}}"
    assert open_auth_secret(job_row(), box) is None


@pytest.mark.parametrize(
    "reason",
    [
        "rotated key",  # sealed under another key
        "copied row",  # sealed for another job
    ],
)
def test_an_unreadable_auth_secret_is_permanent(reason: str) -> None:
    box = SecretBox(os.urandom(32))
    row = job_row(auth_type="bearer")
    if reason == "rotated key":
        row["auth_secret"] = SecretBox(os.urandom(32)).seal("t", auth_context(row["id"]))
    else:
        row["auth_secret"] = box.seal("t", auth_context(uuid.uuid4()))
    with pytest.raises(PermanentCallError, match="cannot be decrypted"):
        open_auth_secret(row, box)


# What the spec marks for redaction


def test_every_secret_variable_is_redacted_whether_or_not_the_job_uses_it() -> None:
    spec = build(url="https://h.example/{{REGION}}")
    assert spec.secrets.shared == SECRET_VALUES
    assert spec.secrets.own == frozenset()


@pytest.mark.parametrize(
    ("overrides", "auth_secret", "credentials"),
    [
        ({}, None, set()),  # no auth: nothing beyond the secret variables
        # a resolved credential, whether or not it came from a variable
        ({"auth_type": "bearer"}, "inline-token", {"inline-token"}),
        (
            {"auth_type": "basic", "auth_config": {"username": "alice"}},
            "{{PASS}}",
            {PASSWORD, base64.b64encode(f"alice:{PASSWORD}".encode()).decode()},
        ),
        ({"auth_type": "api_key"}, "{{KEY}}", {API_KEY}),
        ({"auth_type": "bearer"}, "t", {"t"}),  # however short
        # a password in the URL's userinfo
        ({"url": "https://bob:hunter%2022@h.example/"}, None, {"hunter%2022", "hunter 22"}),
    ],
)
def test_the_spec_lists_what_to_redact(
    overrides: dict[str, Any], auth_secret: str | None, credentials: set[str]
) -> None:
    assert build(auth_secret=auth_secret, **overrides).secrets.values == (
        SECRET_VALUES | credentials
    )


def test_the_spec_repr_does_not_leak() -> None:
    spec = build(url="https://h.example/{{TOKEN}}", auth_type="bearer", auth_secret=TOKEN)
    assert TOKEN not in repr(spec)


# Redaction


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        ("token=abcd1234", {"abcd1234"}, "token=REDACTED"),
        ("abcd1234 and abcd1234", {"abcd1234"}, "REDACTED and REDACTED"),  # every occurrence
        ("abcdefgh", {"abcd", "abcdefgh"}, "REDACTED"),  # longest first
        ("xxxx", {"xxxx", "REDA"}, "REDACTED"),  # one pass: replacements are not re-read
        ("a secret: ab", {"ab"}, "a secret: REDACTED"),  # however short
        ("status 401", {"1"}, "status 40REDACTED"),  # even one character
        ("nothing", {""}, "nothing"),  # empty secrets are skipped
        ("nothing", set(), "nothing"),
        ("q=a+b%26c+d", {"a b&c d"}, "q=REDACTED"),  # form-encoded in a query
        ("/a%20b%26c%20d/", {"a b&c d"}, "/REDACTED/"),  # percent-encoded
        ('{"echo": "pa\\"ss"}', {'pa"ss'}, '{"echo": "REDACTED"}'),  # JSON-escaped
        ('{"echo": "caf\\u00e9!"}', {"café!"}, '{"echo": "REDACTED"}'),  # JSON \u escapes
        # URL userinfo passwords, known or not
        ("see https://bob:hunter2@h.example/x", set(), "see https://bob:REDACTED@h.example/x"),
        ("redis://:pw1@cache:6379", set(), "redis://:REDACTED@cache:6379"),
        ("http://h.example:8080/a@b", set(), "http://h.example:8080/a@b"),  # a port, not a password
        ("https://bob@h.example/", set(), "https://bob@h.example/"),  # no password
    ],
)
def test_it_redacts(text: str, secrets: set[str], expected: str) -> None:
    assert redact(text, secrets) == expected


@pytest.mark.parametrize(
    ("text", "shared", "own", "expected"),
    [
        ("xabcdefghx", {"abcd"}, {"abcdefgh"}, "xREDACTEDx"),  # the longer own one wins
        ("xabcdefghx", {"abcdefgh"}, {"cd"}, "xREDACTEDx"),  # the longer shared one wins
        # leftmost first, then the search resumes after it: `ef` is found although a
        # shared match (`cdef`) overlapped the own one
        ("abcdef", {"cdef", "ef"}, {"abcd"}, "REDACTEDREDACTED"),
        ("a-b-a", {"a"}, {"b"}, "REDACTED-REDACTED-REDACTED"),
        ("xx", {"RED"}, {"xx"}, "REDACTED"),  # one pass: a replacement is not read again
    ],
)
def test_shared_and_own_secrets_are_redacted_in_one_pass(
    text: str, shared: set[str], own: set[str], expected: str
) -> None:
    assert Secrets(shared, own).redact(text) == expected


def test_a_snippet_is_cut_after_redaction() -> None:
    # The secret straddles the cut: none of it may survive in the kept characters.
    body = ("a" * (SNIPPET_CHARS - 2) + TOKEN + "tail").encode()
    kept = snippet(body, Secrets(own={TOKEN}))
    assert len(kept) == SNIPPET_CHARS
    assert kept == "a" * (SNIPPET_CHARS - 2) + "RE"


def test_a_snippet_tolerates_bytes_that_are_not_utf8() -> None:
    assert snippet(b"ok \xff\xfe", NO_SECRETS) == "ok \ufffd\ufffd"
