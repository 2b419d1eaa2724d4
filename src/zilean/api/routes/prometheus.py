"""`/prometheus/metrics`: core's scrape target, for a session or an API token."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from zilean.api.access import require
from zilean.auth.permissions import Permission

router = APIRouter(tags=["monitoring"])


@router.get(
    "/prometheus/metrics",
    operation_id="get_prometheus_metrics",
    dependencies=[Depends(require(Permission.METRICS_READ))],
    response_class=Response,
)
async def prometheus_metrics(request: Request) -> Response:
    """The snapshot core refreshes every minute, in the Prometheus text format."""
    return Response(request.app.state.metrics_exporter.exposition(), media_type=CONTENT_TYPE_LATEST)
