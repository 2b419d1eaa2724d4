"""Per-client token buckets for the sign-in and invite-acceptance forms.

Clients are keyed by IPv4 address or IPv6 /64 prefix (one host usually owns a whole /64).
The buckets live in process memory: each ui replica limits on its own, which is why the
reverse proxy's own limit stays the primary control.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

IDLE_BUCKET_TTL = 600.0  # seconds without use before a full bucket is forgotten


def client_key(request: Request, *, trust_proxy_headers: bool) -> str:
    """Return the key: the leftmost valid X-Forwarded-For entry when trusted, else the peer."""
    candidate = None
    if trust_proxy_headers:
        forwarded = request.headers.get("x-forwarded-for", "")
        candidate = forwarded.split(",")[0].strip() or None
    for value in (candidate, request.client.host if request.client else None):
        if not value:
            continue
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            continue
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
            return str(ipaddress.IPv6Network((address, 64), strict=False))
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(address)
    return "unknown"


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """A token bucket per key: `rate_per_minute` sustained, `burst` at once."""

    def __init__(
        self,
        rate_per_minute: int,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate_per_minute / 60.0  # tokens per second
        self.burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._last_prune = clock()

    def allow(self, key: str) -> bool:
        """Spend one token for `key`; False when the bucket is empty."""
        now = self._clock()
        self._prune(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def retry_after(self, key: str) -> int:
        bucket = self._buckets.get(key)
        if bucket is None or bucket.tokens >= 1.0:
            return 0
        return math.ceil((1.0 - bucket.tokens) / self.rate)

    def _prune(self, now: float) -> None:
        if now - self._last_prune < IDLE_BUCKET_TTL:
            return
        self._last_prune = now
        full_after = self.burst / self.rate if self.rate else IDLE_BUCKET_TTL
        horizon = max(IDLE_BUCKET_TTL, full_after)
        for key in [k for k, b in self._buckets.items() if now - b.updated > horizon]:
            del self._buckets[key]
