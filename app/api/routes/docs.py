"""GET /docs (Swagger UI), served entirely by the app: nothing from a CDN; GET /redoc redirects to it.

FastAPI's own pages load their scripts from a CDN (blank offline) and carry an inline script, which a
Content-Security-Policy without 'unsafe-inline' refuses. Here the page is plain HTML whose scripts and
stylesheet are files: Swagger UI's from the `fastapi-offline` package (kept, versioned by pip), its
start-up script from app/static/docs/. The page and its assets are answered with the web page's CSP
(app/api/routes/ui.py), so the browser refuses anything from another origin.

ReDoc is not served: it writes its styles into <style> elements at run time (styled-components), which
that CSP refuses, and its nonce option did not reach them (tried with fastapi-offline 1.7.7's build);
relaxing style-src to 'unsafe-inline' for a second viewer of the same spec is not worth it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import fastapi_offline
from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from app.api.routes.ui import STATIC, security_headers
from app.errors import MissingFileError

router = APIRouter(include_in_schema=False)
PACKAGED = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS: dict[str, tuple[Path, str]] = {
    "swagger-ui-bundle.js": (PACKAGED / "swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    "swagger-ui.css": (PACKAGED / "swagger-ui.css", "text/css; charset=utf-8"),
    "favicon.png": (PACKAGED / "favicon.png", "image/png"),
    "swagger-init.js": (STATIC / "docs" / "swagger-init.js", "text/javascript; charset=utf-8"),
}
_SWAGGER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - Swagger UI</title>
<link rel="icon" href="/docs/assets/favicon.png">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/swagger-init.js"></script></body></html>
"""
TITLE = "infonce-search"


@router.get("/docs", response_class=HTMLResponse)
async def swagger_ui() -> HTMLResponse:
    return HTMLResponse(_SWAGGER.format(title=TITLE), headers=security_headers())


@router.get("/redoc")
async def redoc() -> RedirectResponse:
    return RedirectResponse("/docs", status_code=307)


@router.get("/docs/assets/{name}")
async def docs_asset(name: Annotated[str, PathParam(max_length=64)]) -> FileResponse:
    found = ASSETS.get(name)
    if found is None:
        raise MissingFileError(
            f"no documentation asset named {name!r} (there are {', '.join(sorted(ASSETS))})"
        )
    path, media = found
    return FileResponse(path, media_type=media, headers=security_headers())
