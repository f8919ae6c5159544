"""Command-line options backed by contract.jobs.settings.JobSettings, the settings the API reads too.

An option declared here defaults to None ("not given"); the command then builds `JobSettings` from the
environment with the given values on top (`job_settings`), so the worker and the operator CLIs use the same
variables, defaults and validation as the API, and a command-line value still wins. `envvar` stays on the
option so `--help` names the variable; click reading it too only hands the same value over as an override."""

from __future__ import annotations

from typing import Any

import typer

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


def job_settings(**given: Any) -> JobSettings:
    """JobSettings with the command line's given values on top; a bad value is a one-line error, exit 2."""
    try:
        return load_job_settings(**given)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
