"""Write core's OpenAPI document, the source the web app's typed API client is generated
from (`make web-client`); a test regenerates the client and fails when it is stale."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from zilean.api.app import create_core_app
from zilean.config import CoreSettings, Service, load_settings

# Building the schema opens no connection: these values only satisfy validation.
_PLACEHOLDER_URL = "postgresql+psycopg://schema@127.0.0.1:9/schema"
_PLACEHOLDER_KEY = base64.b64encode(bytes(range(32))).decode()


def openapi_document() -> dict[str, Any]:
    """Return core's OpenAPI document, exactly as `/api/openapi.json` serves it."""
    env = {"DATABASE_URL": _PLACEHOLDER_URL, "SETTINGS_ENCRYPTION_KEY": _PLACEHOLDER_KEY}
    settings = load_settings(Service.CORE, env)
    assert isinstance(settings, CoreSettings)
    engine = create_async_engine(_PLACEHOLDER_URL)
    return create_core_app(settings, engine).openapi()


if __name__ == "__main__":
    json.dump(openapi_document(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
