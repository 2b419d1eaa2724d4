from __future__ import annotations

import pytest
from starlette.requests import Request

from zilean.ui.ratelimit import RateLimiter, client_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_the_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_minute=10, burst=5, clock=clock)
    assert [limiter.allow("a") for _ in range(6)] == [True] * 5 + [False]
    assert limiter.retry_after("a") == 6  # one token every 6 seconds
    assert limiter.allow("b")  # another client has its own bucket
    clock.now += 6
    assert limiter.allow("a")
    assert not limiter.allow("a")


def request_from(peer: str, forwarded: str | None = None) -> Request:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded is not None else []
    return Request({"type": "http", "headers": headers, "client": (peer, 5000)})


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "key"),
    [
        ("192.0.2.7", None, False, "192.0.2.7"),  # IPv4 per address
        ("2001:db8:1:2:aaaa::1", None, False, "2001:db8:1:2::/64"),  # IPv6 per /64
        ("2001:db8:1:2:bbbb::9", None, False, "2001:db8:1:2::/64"),  # same /64, same bucket
        ("::ffff:192.0.2.8", None, False, "192.0.2.8"),  # v4-mapped counts as v4
        ("10.0.0.1", "198.51.100.4, 10.0.0.1", True, "198.51.100.4"),  # leftmost entry
        ("10.0.0.1", "198.51.100.4", False, "10.0.0.1"),  # header ignored unless trusted
        ("10.0.0.1", "not-an-ip, 198.51.100.4", True, "10.0.0.1"),  # invalid leftmost: peer
        ("10.0.0.1", " , 198.51.100.4", True, "10.0.0.1"),  # blank leftmost: peer
        ("10.0.0.1", "", True, "10.0.0.1"),  # empty header: peer
    ],
)
def test_clients_are_keyed_by_address_or_ipv6_prefix(
    peer: str, forwarded: str | None, trusted: bool, key: str
) -> None:
    assert client_key(request_from(peer, forwarded), trust_proxy_headers=trusted) == key
