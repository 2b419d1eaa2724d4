"""The mcp service's ASGI app. It holds no encryption key by construction."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_service_app
from zilean.config import McpSettings, Service


def create_mcp_app(settings: McpSettings, engine: AsyncEngine) -> FastAPI:
    return create_service_app(Service.MCP, "Zilean MCP", settings, engine)
