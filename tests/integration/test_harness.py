"""The test harness itself: live servers on loopback and the local HTTP target."""

from __future__ import annotations

import httpx

from tests.support.target import ScriptedResponse, http_target


def test_the_http_target_records_requests_and_plays_scripted_responses() -> None:
    with http_target() as target:
        target.respond(ScriptedResponse(status=503, body=b"busy", headers={"Retry-After": "1"}))
        first = httpx.post(f"{target.base_url}/hook?a=1", content=b"payload", headers={"X-T": "v"})
        second = httpx.get(f"{target.base_url}/again")
        recorded = target.wait_for_requests(2)
    assert (first.status_code, first.text, first.headers["retry-after"]) == (503, "busy", "1")
    assert second.status_code == 200
    assert [(r.method, r.path, r.query) for r in recorded] == [
        ("POST", "/hook", "a=1"),
        ("GET", "/again", ""),
    ]
    assert recorded[0].body == b"payload"
    assert recorded[0].headers["x-t"] == "v"
