"""`GET /healthz`: answers 200 while the process serves HTTP, for probes and `zilean up`."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
