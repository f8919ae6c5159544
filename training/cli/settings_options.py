"""Command-line options backed by contract.jobs.settings.JobSettings, the settings the API reads too.

An option declared here defaults to None ("not given"); the command then builds `JobSettings` from the
environment with the given values on top (`job_settings`), so the worker and the operator CLIs use the same
variables, defaults and validation as the API, and a command-line value still wins. `envvar` stays on the
option so `--help` names the variable; click reading it too only hands the same value over as an override."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from contract.bundles.collections import DEFAULT_COLLECTION, collection_milvus_name
from contract.errors import InfonceSearchError
from contract.index.backend import BackendConfig
from contract.jobs.settings import JobSettings, env_name, field_default, load_job_settings


def setting_option(field: str, *param_decls: str, help: str | None = None) -> Any:
    """A typer option for one JobSettings field: its variable in `--help`, its declared default shown."""
    default = field_default(field)
    return typer.Option(
        *param_decls,
        envvar=env_name(field),
        show_default=False if default is None else str(default),
        help=help,
    )


def setting_extra(field: str) -> dict[str, Any]:
    """For a config field that becomes an option (training/cli/config_options.py): backed by JobSettings,
    its variable read and named in --help, its declared default shown."""
    return {"envvar": env_name(field), "shown_default": field_default(field)}


def job_settings(**given: Any) -> JobSettings:
    """JobSettings with the command line's given values on top; a bad value is a one-line error, exit 2."""
    try:
        return load_job_settings(**given)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None


COLLECTION_HELP = (
    "A collection: its bundles folder is <SEARCH_COLLECTIONS_ROOT>/<NAME> (default root: "
    "<bundles folder>/collections), `default` is the bundles folder itself; with --bundles, that folder is "
    "the default collection's."
)


def collection_option(help: str = COLLECTION_HELP) -> Any:
    return typer.Option("--collection", help=help, show_default=False)


def collection_folder(bundles: Path | None, collection: str | None, *, create: bool = False) -> Path:
    """The bundles folder a command works on: `--bundles` alone, or collection `--collection` (made when
    `create` and missing: publishing into a new collection creates it). One-line error, exit 2, otherwise."""
    if collection is None:
        if bundles is None:
            typer.echo("error: give --bundles DIR or --collection NAME", err=True)
            raise typer.Exit(code=2)
        return bundles
    collections = job_settings(bundles_dir=bundles).collections()
    try:
        if create and not collections.exists(collection) and collection != DEFAULT_COLLECTION:
            if collection in collections.aliases():
                collection = collections.resolve(collection)[0]
            else:
                return collections.create(collection)
        return collections.folder(collections.resolve(collection)[0])
    except InfonceSearchError as exc:
        typer.echo(f"error: --collection {collection}: {exc}", err=True)
        raise typer.Exit(code=2) from None


def collection_backend(backend: BackendConfig, collection: str | None) -> BackendConfig:
    """The backend with the Milvus names of `collection` (`<name>_<collection>`), as jobs use."""
    if collection is None or backend.backend != "milvus":
        return backend
    return replace(backend, milvus_name=collection_milvus_name(backend.milvus_name, collection))
