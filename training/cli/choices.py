"""Options whose values form a fixed set: `--help` shows the set (`[auto|flat|…]`), and a value outside it
is refused by the parser, naming the option and the allowed values, before any work starts."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import typer

from contract.index.backend import IndexKind

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
Device = Literal["auto", "cpu", "cuda"]
JobType = Literal["retrain", "reindex"]
INDEX_KINDS: tuple[str, ...] = get_args(IndexKind)

LOG_LEVEL_HELP = "Level of this project's loggers (libraries stay at WARNING)."


def log_level_option(envvar: str | None = None) -> typer.models.OptionInfo:
    """`--log-level`, any case (`info` is INFO)."""
    return typer.Option("--log-level", envvar=envvar, case_sensitive=False, help=LOG_LEVEL_HELP)


LogLevelOpt = Annotated[LogLevel, log_level_option()]
