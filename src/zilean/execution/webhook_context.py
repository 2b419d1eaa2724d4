"""What a webhook-triggered run knows about the call that fired it, in one place.

The webhook service writes the metadata into the queue job's payload (`AttemptArgs`);
each attempt, retries and loop iterations included, reads it back from there. HTTP jobs
see it as `{{webhook_*}}` placeholders, script jobs as `ZILEAN_WEBHOOK_*` environment
variables plus the body on stdin. A run that no webhook fired gets none of it.
"""

from __future__ import annotations

import json
from typing import Any

from zilean.execution.payload import AttemptArgs, Trigger

# The metadata the webhook service records, by key; each is also a placeholder
# (`{{webhook_<key>}}`) and a script variable (`ZILEAN_WEBHOOK_<KEY>`).
METADATA_KEYS = ("event", "content_type", "request_id", "received_at", "job_id")
PLACEHOLDER_PREFIX = "webhook_"
ENVIRONMENT_PREFIX = "ZILEAN_WEBHOOK_"
BODY_PLACEHOLDER = "webhook_body"
HOPS_VARIABLE = "ZILEAN_WEBHOOK_HOPS"


def webhook_metadata(
    *, event: str, content_type: str, request_id: str, received_at: str, job_id: str
) -> dict[str, str]:
    return {
        "event": event,
        "content_type": content_type,
        "request_id": request_id,
        "received_at": received_at,
        "job_id": job_id,
    }


def _fired_by_webhook(args: AttemptArgs) -> bool:
    return args.trigger == Trigger.WEBHOOK


def _metadata(args: AttemptArgs) -> dict[str, str]:
    stored: dict[str, Any] = args.webhook_metadata or {}
    return {key: str(stored.get(key) or "") for key in METADATA_KEYS}


def _body(args: AttemptArgs) -> str:
    return args.webhook_payload if isinstance(args.webhook_payload, str) else ""


def _json_string_contents(value: str) -> str:
    """`value` escaped as the inside of a JSON string (no quotes around it).

    Escaped so that a payload placed in a JSON string of the job's body stays inside that
    string, and so that a line break in it can never split a header.
    """
    return json.dumps(value, ensure_ascii=False)[1:-1]


def template_variables(args: AttemptArgs) -> dict[str, str]:
    """The `{{webhook_*}}` values of this attempt, escaped; empty unless a webhook fired it."""
    if not _fired_by_webhook(args):
        return {}
    values = {PLACEHOLDER_PREFIX + key: value for key, value in _metadata(args).items()}
    values[BODY_PLACEHOLDER] = _body(args)
    return {name: _json_string_contents(value) for name, value in values.items()}


def script_variables(args: AttemptArgs) -> dict[str, str]:
    """The `ZILEAN_WEBHOOK_*` environment of this attempt; empty unless a webhook fired it.

    Never the body: that goes to stdin, where it is data the script reads, not text the
    interpreter or a shell could ever parse.
    """
    if not _fired_by_webhook(args):
        return {}
    values = {ENVIRONMENT_PREFIX + key.upper(): value for key, value in _metadata(args).items()}
    values[HOPS_VARIABLE] = str(args.webhook_hops or 0)
    # An environment value cannot hold NUL; the service never records one, but be sure.
    return {name: value.replace("\x00", "") for name, value in values.items()}


def script_stdin(args: AttemptArgs) -> bytes:
    """The bytes a script reads on stdin: the webhook's body, else nothing."""
    return _body(args).encode("utf-8") if _fired_by_webhook(args) else b""
