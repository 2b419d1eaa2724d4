"""The MCP endpoint under test: the real mcp app on loopback, tokens issued through core's
API, and the official MCP client (`ClientSession` over streamable HTTP) talking to it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import httpx2
import mcp_types as types
from fastapi import FastAPI
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.actors import client_for
from tests.support.servers import OwnEngineApp, live_server
from zilean.config import McpSettings, Service, load_settings
from zilean.db.engine import create_engine
from zilean.mcp.app import create_mcp_app

CLIENT_TIMEOUT = 30.0  # seconds: a wedged endpoint fails the test instead of hanging it


@contextmanager
def mcp_server(database_url: str) -> Iterator[str]:
    """Serve the mcp service (loaded as `zilean mcp` loads it) with an engine of its own,
    used only on the server's event loop; yield its base URL."""
    settings = load_settings(Service.MCP, {"DATABASE_URL": database_url, "TZ": "UTC"})
    assert isinstance(settings, McpSettings)
    engine = create_engine(database_url)
    with live_server(OwnEngineApp(create_mcp_app(settings, engine), engine)) as base:
        yield base


async def switch_mcp(core: FastAPI, session: str, enabled: bool) -> dict[str, Any]:
    async with client_for(core, session) as client:
        response = await client.put("/api/settings/mcp", json={"enabled": enabled})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def issue_token(
    core: FastAPI, session: str, role_id: object, *, name: str = "agent", expires_in: str = "90d"
) -> dict[str, Any]:
    """Create an MCP token through `POST /api/mcp-tokens`; return the whole response."""
    async with client_for(core, session) as client:
        response = await client.post(
            "/api/mcp-tokens",
            json={"name": name, "role_id": str(role_id), "expires_in": expires_in},
        )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@asynccontextmanager
async def mcp_session(
    base: str, headers: dict[str, str] | None = None, *, token: str | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session, as a desktop client opens one."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with (
        httpx2.AsyncClient(headers=sent, timeout=CLIENT_TIMEOUT) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def tool_names(base: str, token: str) -> list[str]:
    async with mcp_session(base, token=token) as session:
        listed = await session.list_tools()
    return [tool.name for tool in listed.tools]


async def call(base: str, token: str, name: str, **arguments: Any) -> types.CallToolResult:
    async with mcp_session(base, token=token) as session:
        return await session.call_tool(name, arguments)


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """A successful tool result's data; its text content says the same."""
    assert not result.is_error, result.content
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structured_content
    data: dict[str, Any] = result.structured_content
    return data


def error_text(result: types.CallToolResult) -> str:
    """A tool error's message, as the agent reads it."""
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    return text.text


async def raw_post(
    base: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> httpx.Response:
    """One JSON-RPC `initialize` straight over HTTP, to see the status the guard answers."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    async with httpx.AsyncClient() as client:
        return await client.post(
            f"{base}/mcp",
            json=body,
            headers={"Accept": "application/json, text/event-stream", **(headers or {})},
            **kwargs,
        )


async def protocol_error(action: Awaitable[object]) -> MCPError:
    """The MCP error `action` fails with, out of the task groups the client runs in."""
    try:
        await action
    except BaseException as exc:
        found: BaseException = exc
        while isinstance(found, BaseExceptionGroup) and len(found.exceptions) == 1:
            found = found.exceptions[0]
        if isinstance(found, MCPError):
            return found
        raise
    raise AssertionError("the call succeeded")


async def refusal(base: str, **headers: str) -> str:
    """What the official client reports when the endpoint refuses to let it in."""

    async def connect() -> None:
        async with mcp_session(base, headers):
            pass

    return (await protocol_error(connect())).message
