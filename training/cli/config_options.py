"""Command-line options generated from pydantic configs: one option per field, named after it
(`--hard-negatives`), typed by it, its help the field's `description`. `train` and `pipeline` get
TrainConfig's (with `--config FILE.json`, explicit options win), `distill` DistillConfig's, `index` and
`pipeline` the publishing options (training/cli/publish_options.py); the config validates the values."""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from contract.config import TrainConfig
from training.cli.support import DURATIONS, fail, validation_message

Command = TypeVar("Command", bound=Callable[..., None])
Config = TypeVar("Config", bound=BaseModel)


def descriptions(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> its description, the option's help; a field without one is an error."""
    missing = [name for name, field in model.model_fields.items() if not field.description]
    if missing:  # a field without one would be an option without help
        raise TypeError(f"{model.__name__} fields without a description: {', '.join(missing)}")
    return {name: str(field.description) for name, field in model.model_fields.items()}


def parse_duration(text: str) -> float:
    """'90s', '10m', '1.5h' or plain seconds ('600') -> seconds; ValueError for anything else."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value = text.strip().lower()
    factor = units.get(value[-1:], 1.0) if value else 1.0
    number = value[:-1] if value[-1:] in units else value
    try:
        seconds = float(number) * factor
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h, or seconds)") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{text!r}: a duration must be a positive, finite time")
    return seconds


HELP: dict[str, str] = descriptions(TrainConfig)  # field name -> its description, the option's help

ConfigFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", help="JSON file of TrainConfig fields (or a run's config.json); explicit options win."
    ),
]


def _optional_inner(annotation: Any) -> Any:
    """`X | None` → X; anything else as it is."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _optional_inner(inner[0])
    return annotation


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(_optional_inner(annotation)) is list


def option_type(annotation: Any) -> Any:
    """The click-friendly type of a config field: `X | None` → X; a Literal stays one (typer shows and checks
    its values, e.g. --loss, --device); a list is one comma-separated string (`--variants distilled,static`)."""
    inner = _optional_inner(annotation)
    if typing.get_origin(inner) is list:
        return str
    return inner


def _extra(field: FieldInfo) -> dict[str, Any]:
    """What a field's `json_schema_extra` adds for its option: `envvar`, `shown_default`."""
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def _help(name: str, field: FieldInfo) -> str:
    """The description, then the default as a user types it (`distilled,static`); none shown for None."""
    default = _extra(field).get("shown_default", field.default)
    if isinstance(default, list):
        default = ",".join(str(v) for v in default)
    written = " Written 90s, 10m, 1h or seconds." if name in DURATIONS else ""
    return str(field.description) + written + ("" if default is None else f" [default: {default}]")


def config_options(model: type[BaseModel]) -> list[inspect.Parameter]:
    """One keyword option per field of `model`; its default None means "keep the config's value", so the
    model's own default (shown in the help) and --config FILE apply."""
    descriptions(model)  # every option has its help
    options = []
    for name, field in model.model_fields.items():
        kind = str if name in DURATIONS else option_type(field.annotation)
        flag = DURATIONS.get(name, f"--{name.replace('_', '-')}")
        flags = [f"{flag}/--no-{name.replace('_', '-')}"] if kind is bool else [flag]
        envvar = _extra(field).get("envvar")
        option = typer.Option(*flags, help=_help(name, field), show_default=False, envvar=envvar)
        options.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind | None, option]
            )
        )
    return options


def with_config_options(*models: type[BaseModel]) -> Callable[[Command], Command]:
    """Give a command that ends in `**overrides` one option per field of each model: typer reads the
    signature, so the command's declared options stay as written and `**overrides` is replaced by the
    generated ones (the values arrive in `overrides`; `given_config` builds each model from them)."""
    generated = [option for model in models for option in config_options(model)]
    names = [option.name for option in generated]
    clashes = {name for name in names if names.count(name) > 1}
    if clashes:
        raise TypeError(f"options generated twice: {', '.join(sorted(clashes))}")

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        declared = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        command.__signature__ = signature.replace(parameters=declared + generated)  # type: ignore[attr-defined]
        return command

    return decorate


def given_values(model: type[BaseModel], overrides: dict[str, Any]) -> dict[str, Any]:
    """The options of `model`'s fields that were given (not None), a list option split at its commas."""
    values = {}
    for name, field in model.model_fields.items():
        value = overrides.get(name)
        if value is None:
            continue
        if _is_list(field.annotation) and isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if name in DURATIONS and isinstance(value, str):
            try:
                value = parse_duration(value)
            except ValueError as exc:
                fail(f"invalid option {DURATIONS[name]}: {exc}")
        values[name] = value
    return values


def given_config(
    model: type[Config],
    overrides: dict[str, Any],
    *,
    base: dict[str, Any] | None = None,
    source: Path | None = None,
) -> Config:
    """`model` from `base` (a config file's values, read from `source`) with the given options on top; an
    invalid value ends the command as one line naming the option (and the file)."""
    try:
        return model(**{**(base or {}), **given_values(model, overrides)})
    except ValidationError as exc:
        where = f" (in {source})" if source is not None else ""
        fail(validation_message(exc, model) + where)


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
    return given_config(TrainConfig, overrides, base=values, source=config_file)
