"""The admin single-page app: its built assets, and index.html for every client route.

The app is built from web/ into `spa/` (`make web`). Client routes answer index.html to a
signed-in user and redirect anyone else to the sign-in page, as the server pages do; the
app itself handles a session that ends while it is open.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from zilean.auth.principal import Principal
from zilean.ui.pages import signed_in_user

SPA_DIR = Path(__file__).parent / "spa"
INDEX = SPA_DIR / "index.html"
ASSETS_PREFIX = "/app-assets"
# Client routes (web/src/router.tsx); anything else stays a 404.
CLIENT_ROUTES = (
    "/",
    "/jobs",
    "/jobs/new",
    "/jobs/import",
    "/jobs/{job_id}",
    "/jobs/{job_id}/edit",
    "/queue",
    "/monitoring",
    "/settings",
    "/settings/{section}",
)
NOT_BUILT = (
    "<!doctype html><title>Zilean</title><h1>The admin app is not built</h1>"
    "<p>Run <code>make web</code> (or <code>make run</code>, which builds it), then reload."
    ' Your account: <a href="/account">/account</a>.</p>'
)

router = APIRouter(include_in_schema=False)


async def spa_index(principal: Principal = Depends(signed_in_user)) -> Response:  # noqa: B008
    """Serve the app's page; it is never cached, so a rebuild is picked up at once."""
    if not INDEX.is_file():
        return HTMLResponse(NOT_BUILT, status_code=503)
    return FileResponse(INDEX, headers={"Cache-Control": "no-store"})


for _path in CLIENT_ROUTES:
    router.add_api_route(_path, spa_index, methods=["GET"])


def mount_spa(app: FastAPI) -> None:
    """Add the client routes and, once built, the hashed asset files."""
    app.include_router(router)
    assets = SPA_DIR / ASSETS_PREFIX.lstrip("/")
    if assets.is_dir():
        app.mount(ASSETS_PREFIX, StaticFiles(directory=assets), name="spa-assets")
