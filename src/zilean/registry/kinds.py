"""The job fields' enumerations and limits, without the request model.

The workers need these on every attempt; keeping them apart from `fields.py` keeps
pydantic out of worker processes (several megabytes each).
"""

from __future__ import annotations

from enum import StrEnum

# Defined with the job kinds, read by the registry from here.
from zilean.jobkinds.definitions import JobType as JobType

MAX_EXEC_TIMEOUT_MS = 1_800_000  # 30 minutes
MAX_POOL_COUNT = 20
MAX_RETRY_ATTEMPTS = 100
MAX_NAME_LENGTH = 255
DEFAULT_LOOP_RESPONSE_PATH = "result.remaining"


class AuthType(StrEnum):
    NONE = "none"
    BEARER = "bearer"
    BASIC = "basic"
    API_KEY = "api_key"


class OverlapPolicy(StrEnum):
    SKIP = "skip"  # one lock per pool index; a firing for a busy index is dropped
    ALLOW = "allow"  # never locks


class RetryMode(StrEnum):
    EXPONENTIAL = "exponential"  # min(base x multiplier^(attempt-1), max), no jitter
    FIXED = "fixed"  # every retry waits retry_base_delay_ms
    EXPONENTIAL_JITTER = "exponential_jitter"  # uniform in [0, the exponential delay]


class NotifyOn(StrEnum):
    NONE = "none"
    SUCCESS = "success"
    FAILURE = "failure"
    BOTH = "both"


class OneOffAfterRun(StrEnum):
    KEEP = "keep"  # disable the row and leave it
    DELETE = "delete"  # remove the row


NOTIFY_FIELDS = (
    "notify_on",
    "notify_all_targets",
    "notify_targets",
    "notify_after_failures",
    "notify_reminder_minutes",
)
HTTP_FIELDS = ("url", "query_params", "body", "headers", "auth_type", "auth_config")
SCRIPT_FIELDS = ("script_body", "script_args", "script_secret_vars", "capabilities")
