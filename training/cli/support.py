"""What every command of the CLI shares: one-line errors (exit code 2), logging setup, --quiet, --json."""

from __future__ import annotations

import contextlib
import json
import typing
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ValidationError

from contract.config import TrainConfig
from contract.errors import InfonceSearchError
from contract.log_setup import configure_logging as setup_logging
from contract.log_setup import silence_progress_bars

QuietOpt = Annotated[
    bool, typer.Option("--quiet", help="No progress bars at all (the libraries' loading bars included).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (logs stay on stderr).")]


def fail(message: str) -> typing.NoReturn:
    """One line on stderr and exit code 2: what a user sees instead of a traceback."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def validation_message(error: ValidationError, config: type[BaseModel] = TrainConfig) -> str:
    """`--lr: Input should be greater than 0` rather than pydantic's multi-line dump; a field of `config`
    (whose options the command has) is named as its option (`--variants`, not `variants.0`)."""
    parts = []
    for item in error.errors():
        name = ".".join(str(x) for x in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if not name:  # a check across fields (TrainConfig's model validator)
            parts.append(message)
        else:
            field = str(item["loc"][0])
            flag = f"--{field.replace('_', '-')}" if field in config.model_fields else name
            parts.append(f"{flag}: {message}")
    return "invalid option " + "; ".join(parts)


def configure_logging(level: str, *, quiet: bool = False) -> None:
    """Root at WARNING, the project's loggers at `level` (contract/log_setup.py says why); `quiet`: no
    progress bar at all, the libraries' included (call before the command's heavy imports)."""
    setup_logging(level, datefmt="%H:%M:%S")
    if quiet:
        silence_progress_bars()


def echo_json(data: Any) -> None:
    """`--json`: the command's result as one JSON document on stdout (logs stay on stderr)."""
    typer.echo(json.dumps(data, indent=2, default=str))


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Domain and validation errors end the command as one line on stderr (exit 2), never a traceback."""
    try:
        yield
    except InfonceSearchError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(validation_message(exc))
