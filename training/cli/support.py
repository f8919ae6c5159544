"""What every command of the CLI shares: one-line errors (exit code 2), logging setup, --quiet, --json."""

from __future__ import annotations

import contextlib
import json
import sys
import typing
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ValidationError

from contract.config import TrainConfig
from contract.errors import InfonceSearchError
from contract.log_setup import configure_logging, silence_progress_bars

QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        help="No progress bars at all (the libraries' loading bars included); none either when stderr is "
        "not a terminal.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (logs stay on stderr).")]


# fields given on the command line as a duration (`--time-budget 10m`), not a number of seconds
DURATIONS = {"time_budget_s": "--time-budget"}


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
            flag = DURATIONS.get(field, flag)
            parts.append(f"{flag}: {message}")
    return "invalid option " + "; ".join(parts)


def bars_wanted(quiet: bool) -> bool:
    """Progress bars only for someone watching a terminal: not with --quiet, and not when stderr is a file
    or a pipe (a log, CI, `2>run.log`), where every redraw of a bar lands between the log lines."""
    return not quiet and sys.stderr.isatty()


def configure_command_output(level: str, *, quiet: bool = False) -> None:
    """Root at WARNING, the project's loggers at `level` (contract/log_setup.py says why); no progress bar
    at all, the libraries' included, with `quiet` or when stderr is not a terminal (`bars_wanted`; call
    before the command's heavy imports). Commands then ask `progress_bars_enabled()` for their own bars."""
    configure_logging(level, datefmt="%H:%M:%S")
    if not bars_wanted(quiet):
        silence_progress_bars()


def echo_json(data: Any) -> None:
    """`--json`: the command's result as one JSON document on stdout (logs stay on stderr)."""
    typer.echo(json.dumps(data, indent=2, default=str))


def text_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a plain-text table: a header row, then the rows, each column left-aligned to its
    widest cell and two spaces from the next; the last column runs free (errors, gate reasons)."""
    lines = [list(header), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return [
        "  ".join(
            [cell.ljust(width) for cell, width in zip(line, widths, strict=False)] + [line[-1]]
        ).rstrip()
        for line in lines
    ]


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Domain and validation errors end the command as one line on stderr (exit 2), never a traceback."""
    try:
        yield
    except InfonceSearchError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(validation_message(exc))
