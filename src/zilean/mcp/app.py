"""The mcp service's ASGI app: `/mcp` (streamable HTTP) and an unauthenticated `/healthz`.

It holds no encryption key by construction (its settings refuse to load with one). Every
HTTP request to `/mcp` is checked here before the MCP SDK sees it: 503 while the endpoint
is switched off, then 401 unless `Authorization: Bearer <token>` names a live MCP token
(no cookie, no other scheme). The SDK runs stateless: each request stands alone, with the
caller resolved afresh, so a deleted token or a changed role counts from the next request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
import structlog
from fastapi import FastAPI
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from zilean import __version__
from zilean.api.app import create_service_app
from zilean.audit.log import Actor
from zilean.auth.principal import Principal
from zilean.config import McpSettings, Service
from zilean.errors import ApiError
from zilean.input_models import validation_message
from zilean.mcp.settings import mcp_enabled
from zilean.mcp.tokens import mcp_principal
from zilean.mcp.tools import TOOLS_BY_NAME, Call, tools_for

log = structlog.get_logger(__name__)

MCP_PATH = "/mcp"
# Tool calls are a few hundred bytes; nothing an agent sends here needs more.
MAX_REQUEST_BYTES = 64 * 1024
PRINCIPAL_KEY = "zilean.principal"  # where the guard leaves the caller in the ASGI scope
DISABLED = "the MCP endpoint is disabled; enable it under Settings, MCP"
UNAUTHORIZED = "invalid or expired token"
# JSON-RPC's range for server-defined errors: these are refusals, not protocol faults.
DISABLED_CODE = -32003
UNAUTHORIZED_CODE = -32001
INSTRUCTIONS = (
    "Zilean runs scheduled jobs (HTTP calls and scripts). These tools read its job registry, "
    "activity, metrics and audit log, and enable, disable or run one job at a time. Find a "
    "job's id with zilean_list_jobs first."
)


def _refusal(status: int, code: int, message: str) -> JSONResponse:
    """A JSON-RPC error body, so MCP clients show the reason rather than a bare status."""
    headers = {"WWW-Authenticate": 'Bearer realm="zilean-mcp"'} if status == 401 else None
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


class Guard:
    """The switch and the bearer check in front of the SDK's transport."""

    def __init__(self, engine: AsyncEngine, inner: StreamableHTTPASGIApp) -> None:
        self.engine = engine
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self.engine.begin() as conn:
            enabled = await mcp_enabled(conn)
            principal = await self._principal(conn, scope) if enabled else None
        if not enabled:
            await _refusal(503, DISABLED_CODE, DISABLED)(scope, receive, send)
            return
        if principal is None:
            await _refusal(401, UNAUTHORIZED_CODE, UNAUTHORIZED)(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.inner(scope, receive, send)

    @staticmethod
    async def _principal(conn: Any, scope: Scope) -> Principal | None:
        header = Request(scope).headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            return None
        principal: Principal | None = await mcp_principal(conn, credential.strip())
        return principal


def _caller(request: Any) -> tuple[Principal, str | None]:
    """The principal the guard resolved for this HTTP request, and the client's address."""
    assert request is not None, "MCP requests arrive over HTTP only"
    principal = request.scope[PRINCIPAL_KEY]
    assert isinstance(principal, Principal)
    client = request.scope.get("client")
    return principal, client[0] if client else None


def _result(payload: dict[str, Any]) -> types.CallToolResult:
    structured = to_jsonable_python(payload)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(structured, indent=1))],
        structured_content=structured,
    )


def _tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def build_server(settings: McpSettings, engine: AsyncEngine) -> Server[Any]:
    async def list_tools(ctx: Any, _: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        principal, _ip = _caller(ctx.request)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    title=tool.title,
                    description=tool.description,
                    input_schema=tool.input_schema(),
                    annotations=types.ToolAnnotations(
                        title=tool.title,
                        read_only_hint=tool.read_only,
                        destructive_hint=False,
                        idempotent_hint=tool.name != "zilean_run_job",
                        open_world_hint=False,
                    ),
                )
                for tool in tools_for(principal)
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        principal, ip = _caller(ctx.request)
        tool = TOOLS_BY_NAME.get(params.name)
        if tool is None or not principal.can(tool.permission):
            # A tool the token's role does not cover is as unknown as one that does not exist.
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
        try:
            arguments = tool.arguments.model_validate_json(json.dumps(params.arguments or {}))
        except ValidationError as exc:
            return _tool_error(validation_message(exc.errors()))
        call = Call(
            engine=engine,
            principal=principal,
            actor=Actor(user_id=principal.user_id, email=principal.email, ip=ip),
            default_timezone=settings.timezone,
        )
        try:
            payload = await tool.run(call, arguments)
        except ApiError as exc:  # unknown job, a refused run, a bad filter value
            return _tool_error(exc.message)
        log.info(
            "tool called",
            action="mcp.tool",
            tool=tool.name,
            token_id=str(principal.token_id),
        )
        return _result(payload)

    return Server(
        "zilean",
        version=__version__,
        title="Zilean",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _session_manager_running(app: FastAPI) -> str | None:
    """`/mcp` answers only inside the SDK's session manager, which the lifespan starts."""
    return None if app.state.mcp_serving else "the MCP session manager is not running"


def create_mcp_app(settings: McpSettings, engine: AsyncEngine) -> FastAPI:
    manager = StreamableHTTPSessionManager(
        app=build_server(settings, engine),
        json_response=True,
        stateless=True,
        # DNS rebinding tricks a browser into calling a local server; it cannot make the
        # browser send our bearer token, and the endpoint is meant to sit behind a proxy
        # under any host name, so the Host/Origin allow-list would only get in the way.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_REQUEST_BYTES,
    )

    @asynccontextmanager
    async def serving(app: FastAPI) -> AsyncIterator[None]:
        async with manager.run():
            app.state.mcp_serving = True
            try:
                yield
            finally:
                app.state.mcp_serving = False

    app = create_service_app(Service.MCP, "Zilean MCP", settings, engine, background=serving)
    app.state.mcp_serving = False
    app.state.health_checks.append(_session_manager_running)
    app.router.routes.append(Route(MCP_PATH, Guard(engine, StreamableHTTPASGIApp(manager))))
    return app
