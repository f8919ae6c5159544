"""The training options of `train` and `pipeline`, generated from TrainConfig: one option per field,
named after it (`--hard-negatives`), typed and bounded by it, its help the field's `description`.
`--config FILE.json` supplies a whole config; explicit options win."""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from contract.config import TrainConfig
from training.cli.support import fail, validation_message

Command = TypeVar("Command", bound=Callable[..., None])


def _descriptions() -> dict[str, str]:
    missing = [name for name, field in TrainConfig.model_fields.items() if not field.description]
    if missing:  # a field without one would be an option without help
        raise TypeError(f"TrainConfig fields without a description: {', '.join(missing)}")
    return {name: str(field.description) for name, field in TrainConfig.model_fields.items()}


HELP: dict[str, str] = _descriptions()  # field name -> its description, the option's help

ConfigFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", help="JSON file of TrainConfig fields (or a run's config.json); explicit options win."
    ),
]


def option_type(annotation: Any) -> Any:
    """The click-friendly type of a TrainConfig field: `X | None` → X; a Literal stays one (typer shows
    and checks its values, e.g. --loss, --device)."""
    if typing.get_origin(annotation) is typing.Literal:
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return option_type(inner[0])
    return annotation


def config_options() -> list[inspect.Parameter]:
    """One keyword option per TrainConfig field; its default None means "keep the config's value", so the
    model's own default (shown in the help) and --config FILE apply."""
    options = []
    for name, field in TrainConfig.model_fields.items():
        kind = option_type(field.annotation)
        flag = f"--{name.replace('_', '-')}"
        flags = [f"{flag}/--no-{name.replace('_', '-')}"] if kind is bool else [flag]
        option = typer.Option(*flags, help=f"{HELP[name]} [default: {field.default}]", show_default=False)
        options.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind | None, option]
            )
        )
    return options


def with_config_options(command: Command) -> Command:
    """Give a command that ends in `**overrides` one option per TrainConfig field: typer reads the
    signature, so the command's declared options stay as written and `**overrides` is replaced by the
    generated ones (the values arrive in `overrides`)."""
    signature = inspect.signature(command, eval_str=True)
    declared = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = signature.replace(parameters=declared + config_options())  # type: ignore[attr-defined]
    return command


def load_config(config_file: Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """Defaults < --config FILE.json (a TrainConfig object, or a run's config.json) < explicit options."""
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            fail(f"{config_file}: config file not found")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            fail(f"{config_file}: not valid JSON ({exc})")
        if isinstance(loaded, dict) and isinstance(loaded.get("config"), dict):
            loaded = loaded["config"]  # a previous run's out/config.json
        if not isinstance(loaded, dict):
            fail(f"{config_file}: expected a JSON object of TrainConfig fields")
        values.update(loaded)
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return TrainConfig(**values)
    except ValidationError as exc:
        where = f" (in {config_file})" if config_file is not None else ""
        fail(validation_message(exc) + where)
