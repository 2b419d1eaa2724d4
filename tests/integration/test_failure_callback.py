"""Callbacks against a real local server: the POST it sends, and what it logs when refused."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import pytest

from tests.support.servers import free_port
from tests.support.target import HttpTarget, ScriptedResponse
from zilean.execution.callback import Callbacks, FailureReport

REPORT = FailureReport("job-1", "nightly sync", 3, "endpoint returned status 500: é", 500)


def logged(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [record.msg for record in caplog.records if isinstance(record.msg, dict)]


async def test_it_posts_the_report_once_as_compact_json(
    target: HttpTarget, http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    callbacks = Callbacks(http_session, default_url=None)

    with caplog.at_level(logging.INFO):
        callbacks.send(f"{target.base_url}/failed", REPORT)
        await callbacks.settle()

    [sent] = target.requests
    assert (sent.method, sent.path) == ("POST", "/failed")
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["user-agent"] == "Zilean"
    # What httpx sent: compact separators, UTF-8 rather than \\u escapes.
    assert (
        sent.body == json.dumps(REPORT.body(), ensure_ascii=False, separators=(",", ":")).encode()
    )
    assert [entry["action"] for entry in logged(caplog)] == ["callback.sent"]


@pytest.mark.parametrize("status", [302, 404, 500])  # a redirect is not followed: refused
async def test_a_non_2xx_answer_is_logged_as_refused_and_not_retried(
    target: HttpTarget,
    http_session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    target.respond(ScriptedResponse(status, b"no", {"Location": f"{target.base_url}/moved"}))
    callbacks = Callbacks(http_session, default_url=None)

    with caplog.at_level(logging.INFO):
        callbacks.send(f"{target.base_url}/failed", REPORT)
        await callbacks.settle()

    assert [request.path for request in target.requests] == ["/failed"]
    [entry] = logged(caplog)
    assert (entry["action"], entry["status_code"], entry["job_id"]) == (
        "callback.refused",
        status,
        "job-1",
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/failed",  # nothing listens there
        "ftp://127.0.0.1:{port}/failed",  # not http or https
        "http://127.0.0.1:{port}/a\nb",  # cannot be sent
    ],
)
async def test_a_callback_that_cannot_be_sent_is_only_logged(
    http_session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture, url: str
) -> None:
    callbacks = Callbacks(http_session, default_url=None)

    with caplog.at_level(logging.INFO):
        callbacks.send(url.format(port=free_port()), REPORT)
        await callbacks.settle()

    [entry] = logged(caplog)
    assert (entry["action"], entry["job_id"]) == ("callback.failed", "job-1")


async def test_the_jobs_url_wins_over_the_workers(http_session: aiohttp.ClientSession) -> None:
    callbacks = Callbacks(http_session, default_url="http://worker.example/failed")

    assert callbacks.url_for(" http://job.example/failed ") == "http://job.example/failed"
    assert callbacks.url_for("") == "http://worker.example/failed"
    assert callbacks.url_for(None) == "http://worker.example/failed"
