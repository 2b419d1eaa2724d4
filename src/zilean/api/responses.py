"""The base of every response model, and the error body every route may answer with.

Response models forbid extra fields: a route that returns a key its model does not
declare fails (a 500 in tests and schemathesis) instead of silently dropping it, so the
OpenAPI document cannot drift from what the API really sends.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ResponseModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(ResponseModel):
    """Every error: a message a person can read, naming the field at fault when there is one."""

    error: str
