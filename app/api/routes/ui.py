"""The web page at `/` (static HTML, CSS, plain JavaScript; no build step, nothing from a CDN) and the
routes only it needs: its assets, an overview of what the page should offer, and the report's PNG plots.

Everything else the page shows comes from the public API itself (`/search`, `/bundles`, `/jobs`,
`/generalization-gap`), so the page is one more client of the documented routes. Mutations (activate,
jobs) send the API key the user typed into the page; the page keeps it in memory only.
"""

from __future__ import annotations

import re
import typing
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse
from pydantic import BaseModel, Field

from app.api.deps import HotSwapDep, SettingsDep
from app.engine import retrieval_modes
from app.errors import MissingFileError
from app.schemas.search import SearchRequest
from contract.bundles.bundle import REPORT_DIR
from contract.errors import BundleNotFound

router = APIRouter(tags=["ui"])
STATIC = Path(__file__).resolve().parents[2] / "static"
MEDIA = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
# the page's stylesheet and script modules: the files of app/static with those suffixes, listed once
ASSETS = {p.name: MEDIA[p.suffix] for p in sorted(STATIC.iterdir()) if p.suffix in MEDIA}
# the page loads nothing from elsewhere, and the browser is told to refuse it if it ever tried
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PLOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.png$")
ASSET_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {m.split(";")[0]: {"schema": {"type": "string"}} for m in MEDIA.values()}},
    404: {"description": "No page asset with that name."},
}


@router.get("/", response_class=HTMLResponse, summary="The web page")
async def page() -> FileResponse:
    """Search, the live bundle and its versions, jobs, and the generalization-gap report with its plots."""
    return FileResponse(
        STATIC / "index.html", media_type="text/html; charset=utf-8", headers=security_headers()
    )


# A route over a fixed list rather than Starlette's StaticFiles mount: the page's few files, answered with the API's
# error shape, its CSP header and in the OpenAPI document; no path from the request ever reaches the disk.
@router.get(
    "/ui/assets/{name}",
    response_class=FileResponse,
    summary="The page's stylesheet and script modules",
    responses=ASSET_RESPONSES,
)
async def asset(name: Annotated[str, PathParam(max_length=64)]) -> FileResponse:
    media = ASSETS.get(name)
    if media is None:
        raise MissingFileError(f"no page asset named {name!r} (there are {', '.join(sorted(ASSETS))})")
    return FileResponse(STATIC / name, media_type=media, headers=security_headers())


def security_headers() -> dict[str, str]:
    """The page's headers, also on /docs and /redoc (app/api/routes/docs.py)."""
    # no-cache = revalidate each time (cheap: ETag), so an upgraded server never runs a stale script
    return {"Content-Security-Policy": CSP, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


class LiveSummary(BaseModel):
    version: str
    model_name: str = Field(description="The model's name (from its report; else its folder's name).")
    model: dict[str, Any] = Field(description="Identity of the live model, as in GET /generalization-gap.")
    index_recall_at_10: float | None = Field(
        description="Recall@10 of the ANN index against exact search, measured on real queries when it was "
        "built; null for an exact (flat) index."
    )
    has_report: bool
    modes: list[str] = Field(
        description="The modes this bundle can serve (dense only for one without a lexical index)."
    )
    default_mode: str = Field(
        description="The mode a text query without `mode` gets from this bundle (its recorded default, the "
        "best on validation queries; dense for a bundle without a lexical index)."
    )
    fusion: dict[str, Any] | None = Field(
        None,
        description="How hybrid mode fuses its two lists (`method` rrf with `rrf_k`, or convex with "
        "`alpha`; `depth` candidates per list); null for a dense-only bundle.",
    )


class Overview(BaseModel):
    search_modes: list[str] = Field(
        description="Values `mode` of POST /search accepts; empty when this server has no modes."
    )
    default_mode: str | None = Field(
        description="The request schema's default mode (null: the live bundle's own, `live.default_mode`)."
    )
    max_top_k: int
    job_types: list[str]
    live: LiveSummary | None = Field(description="The bundle this process serves; null when none is live.")
    not_live_reason: str | None = None


@router.get("/ui/overview", response_model=Overview, summary="What the page offers on this server")
async def overview(hot_swap: HotSwapDep, settings: SettingsDep) -> Overview:
    """The search modes this server's POST /search accepts, its top_k limit, and the live bundle's identity
    with the measured recall of its index."""
    modes, default = search_modes(SearchRequest)
    live = hot_swap.live
    summary = None
    if live is not None:
        report = live.bundle.report
        base = live.bundle.manifest.base_model
        summary = LiveSummary(
            version=live.version,
            model_name=report.model.name if report else Path(base.rstrip("/")).name,
            model=live.serving_summary(),
            index_recall_at_10=live.bundle.manifest.index.recall_at_10,
            has_report=report is not None,
            modes=retrieval_modes.modes(live.bundle),
            default_mode=retrieval_modes.default_mode(live.bundle),
            fusion=asdict(retrieval_modes.fusion_params(live.bundle))
            if live.bundle.lexical is not None
            else None,
        )
    return Overview(
        search_modes=modes,
        default_mode=default,
        max_top_k=settings.max_top_k,
        job_types=["retrain", "reindex"],
        live=summary,
        not_live_reason=None if live is not None else hot_swap.not_live_reason(),
    )


def search_modes(model: type[BaseModel]) -> tuple[list[str], str | None]:
    """The literal values of the request model's `mode` field, and its default; ([], None) without one.

    Read from the model rather than hard-coded, so the page offers exactly what the server accepts."""
    field = model.model_fields.get("mode")
    if field is None:
        return [], None
    modes = list(dict.fromkeys(_literals(field.annotation)))
    default = field.default if isinstance(field.default, str) else None
    return modes, default


def _literals(annotation: Any) -> list[str]:
    if typing.get_origin(annotation) is Literal:
        return [a for a in typing.get_args(annotation) if isinstance(a, str)]
    return [value for arg in typing.get_args(annotation) for value in _literals(arg)]  # unions, Annotated


@router.get(
    "/bundles/{version}/plots/{name}",
    response_class=FileResponse,
    responses={
        200: {"content": {"image/png": {}}, "description": "The PNG."},
        404: {"description": "No bundle with that version, or no plot with that name in its report."},
    },
    summary="A plot of a bundle's generalization-gap report",
)
async def plot(
    version: Annotated[str, PathParam(max_length=64)],
    name: Annotated[str, PathParam(max_length=160)],
    hot_swap: HotSwapDep,
) -> FileResponse:
    """One PNG beside the bundle's report.json (their names are in the report's `plots`). Bundles never
    change once published, so the answer may be cached."""
    try:
        folder = hot_swap.folder.version_path(version) / REPORT_DIR
    except BundleNotFound:
        raise BundleNotFound(f"no bundle version {version!r}") from None  # no server path in the message
    path = folder / name
    # a plain file name (no separators, no dot-dot) that resolves inside the report folder
    if not PLOT_NAME.match(name) or path.resolve().parent != folder.resolve() or not path.is_file():
        raise MissingFileError(f"bundle {version} has no plot named {name!r}")
    return FileResponse(path, media_type="image/png", headers={"Cache-Control": "public, max-age=86400"})
