"""`python -m training bundles list|activate|prune|verify`: operate a bundles folder without curl.

The same BundleStore the API, jobs and pipeline use (its lock, its CURRENT, its gate log), so an
activation here is picked up by running APIs within their poll interval. `--json` prints the records
as JSON for scripts. Errors are one line on stderr with exit code 2; `verify` exits 1 when a version
fails its checksums.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from contract.errors import InfonceSearchError
from training.cli.settings_options import collection_folder, collection_option, job_settings, setting_option
from training.cli.support import text_table

bundles_app = typer.Typer(
    help="List, activate, prune and verify published bundle versions.", no_args_is_help=True
)

BundlesOpt = Annotated[
    Path | None, setting_option("bundles_dir", "--bundles", help="Bundles folder (versions + CURRENT).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


CollectionOpt = Annotated[str | None, collection_option()]


def _store(given: Path | None, collection: str | None = None) -> Any:
    from training.bundle.store import BundleStore

    bundles = job_settings(bundles_dir=given).bundles_dir  # SEARCH_BUNDLES_DIR or its default, as the API
    if collection is not None:
        bundles = collection_folder(bundles, collection)
    if not bundles.is_dir():
        raise _fail(f"--bundles {bundles}: no such folder")
    return BundleStore(bundles)


def verify_checksums(folder: Path) -> list[str]:
    """Every problem with one version's files against its manifest (missing, changed, unlisted)."""
    from contract.bundles.bundle import UNCHECKED_FILES, read_manifest, sha256_file

    manifest = read_manifest(folder)
    problems = []
    for rel, digest in sorted(manifest.files.items()):
        file = folder / rel
        if not file.is_file():
            problems.append(f"{rel}: missing")
        elif sha256_file(file) != digest:
            problems.append(f"{rel}: checksum mismatch")
    listed = set(manifest.files) | UNCHECKED_FILES
    for file in sorted(folder.rglob("*")):
        rel = file.relative_to(folder).as_posix()
        if file.is_file() and rel not in listed:
            problems.append(f"{rel}: not in the manifest")
    return problems


@bundles_app.command("list")
def list_cmd(bundles: BundlesOpt = None, collection: CollectionOpt = None, as_json: JsonOpt = False) -> None:
    """Published versions, oldest first: live flag, test nDCG@10, the gate's decision."""
    store = _store(bundles, collection)
    problems: list[tuple[str, str]] = []
    versions = store.list_versions(problems)
    if as_json:
        records = [v.model_dump(mode="json") for v in versions]
        typer.echo(json.dumps({"versions": records, "problems": [list(p) for p in problems]}, indent=2))
        return
    rows = []
    for v in versions:
        ndcg = v.metrics.get("test", {}).get("ndcg@10")
        gate = v.gate.reason if v.gate else "no gate decision"
        rows.append([v.version, "live" if v.live else "", "?" if ndcg is None else f"{ndcg:.4f}", gate])
    rows += [[version, "", "", f"problem: {reason}"] for version, reason in problems]
    for line in text_table(("VERSION", "LIVE", "TEST NDCG@10", "GATE"), rows) if rows else ["no versions"]:
        typer.echo(line)


@bundles_app.command("activate")
def activate_cmd(
    version: Annotated[str, typer.Argument(help="A published version id.")],
    bundles: BundlesOpt = None,
    collection: CollectionOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a published version live (roll back or forward); it is validated first."""
    store = _store(bundles, collection)
    try:
        previous = store.current_version()
    except InfonceSearchError:
        previous = None
    try:
        store.activate(version)
    except InfonceSearchError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps({"version": version, "previous": previous}))
    else:
        typer.echo(f"{version} live (was {previous or 'nothing'})")


@bundles_app.command("prune")
def prune_cmd(
    keep: Annotated[
        int, typer.Option("--keep", min=0, help="Newest versions kept (the live one always is).")
    ],
    bundles: BundlesOpt = None,
    collection: CollectionOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete all but the newest --keep versions."""
    try:
        deleted = _store(bundles, collection).prune(keep)
    except InfonceSearchError as exc:
        raise _fail(str(exc)) from None
    typer.echo(
        json.dumps({"deleted": deleted}) if as_json else f"deleted {len(deleted)}: {' '.join(deleted)}"
    )


@bundles_app.command("verify")
def verify_cmd(
    version: Annotated[str | None, typer.Argument(help="One version; every version when omitted.")] = None,
    bundles: BundlesOpt = None,
    collection: CollectionOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every file of a version (or of all) against the sha256 checksums in its manifest; exit 1 on any
    problem."""
    store = _store(bundles, collection)
    try:
        versions = [version] if version else [v.version for v in store.list_versions()]
        results = {v: verify_checksums(store.version_path(v)) for v in versions}
    except InfonceSearchError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps({v: {"ok": not p, "problems": p} for v, p in results.items()}, indent=2))
    else:
        rows = [[v, "ok" if not p else "FAILED: " + "; ".join(p)] for v, p in results.items()]
        for line in text_table(("VERSION", "CHECKSUMS"), rows):
            typer.echo(line)
    if any(results.values()):
        raise typer.Exit(code=1)
