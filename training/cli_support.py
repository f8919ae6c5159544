"""What every command of the CLI shares: one-line errors (exit code 2) and logging setup."""

from __future__ import annotations

import logging
import typing

import typer
from pydantic import ValidationError

from contract.config import TrainConfig


def fail(message: str) -> typing.NoReturn:
    """One line on stderr and exit code 2: what a user sees instead of a traceback."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def validation_message(error: ValidationError) -> str:
    """`--lr: Input should be greater than 0` rather than pydantic's multi-line dump."""
    parts = []
    for item in error.errors():
        name = ".".join(str(x) for x in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if not name:  # a check across fields (TrainConfig's model validator)
            parts.append(message)
        else:
            flag = f"--{name.replace('_', '-')}" if name in TrainConfig.model_fields else name
            parts.append(f"{flag}: {message}")
    return "invalid option " + "; ".join(parts)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
