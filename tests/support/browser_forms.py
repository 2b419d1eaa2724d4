"""Drive the server-rendered forms with httpx the way a browser would."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


async def csrf_from(client: httpx.AsyncClient, path: str) -> str:
    """GET a form page (which sets the CSRF cookie) and return its hidden token."""
    page = await client.get(path)
    match = _CSRF.search(page.text)
    assert match, f"no CSRF field on {path} ({page.status_code})"
    return match.group(1)


@asynccontextmanager
async def browser(
    app: FastAPI, peer: str = "127.0.0.1", **headers: str
) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client that reaches the app from `peer`."""
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://zilean.test", headers=headers
    ) as client:
        yield client


async def sign_in(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    token = await csrf_from(client, "/login")
    return await client.post(
        "/login", data={"csrf_token": token, "email": email, "password": password}
    )


def sign_in_live(base: str, email: str, password: str) -> httpx.Client | None:
    """Sign in to a running Zilean through its login form; the signed-in client, or None.

    The caller closes the client. A wrong password (or any refusal) returns None.
    """
    client = httpx.Client(base_url=base, timeout=10)
    page = client.get("/login")
    match = _CSRF.search(page.text)
    assert match, f"no CSRF field on /login ({page.status_code})"
    answer = client.post(
        "/login", data={"csrf_token": match.group(1), "email": email, "password": password}
    )
    if answer.status_code != 303:
        client.close()
        return None
    return client
