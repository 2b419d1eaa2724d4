"""The OpenAPI document core serves, completed with what FastAPI cannot infer.

FastAPI documents a `422` validation body we never send (our handlers answer `400` in
the `{"error": ...}` shape) and no error bodies at all. This replaces the one with the
other on every operation, and documents the redirect a caller without a session gets,
so a generated client (and schemathesis) sees every response the API can give.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts

from zilean.api.access import authorizers
from zilean.api.errors import LOGIN_PATH
from zilean.api.responses import ErrorBody

_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
_ERRORS = {
    "description": "The request was refused: `error` says why, naming the field at fault.",
    "content": {"application/json": {"schema": _ERROR_REF}},
}
_REDIRECT = {
    "description": f"No valid session and no bearer token: a redirect to `{LOGIN_PATH}`.",
    "headers": {"Location": {"schema": {"type": "string"}}},
}
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _signed_in_operations(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every operation that needs a session or a token."""
    found = set()
    for context in iter_route_contexts(app.routes):
        if isinstance(context.original_route, APIRoute) and context.path is not None:
            declared = list(authorizers(context.dependant))
            if declared and not all(authorize.access.public for authorize in declared):
                found |= {(method.lower(), context.path) for method in context.methods or ()}
    return found


def complete_openapi(app: FastAPI) -> dict[str, Any]:
    """Build (once) the document: every operation gets `4XX` error bodies, and those that
    need a caller the `302` to the login page."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, routes=app.routes, description=app.description
    )
    signed_in = _signed_in_operations(app)
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            responses.pop("422", None)
            responses.setdefault("4XX", _ERRORS)
            if (method, path) in signed_in:
                responses.setdefault("302", _REDIRECT)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        components.pop(name, None)
    components["ErrorBody"] = ErrorBody.model_json_schema()
    app.openapi_schema = schema
    return schema
