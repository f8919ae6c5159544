"""`python -m training index`: encode a corpus with a trained model, build its bundle and publish it; the
publishing options are `pipeline`'s too (training/cli/publish_options.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field

from contract.errors import InfonceSearchError
from contract.log_setup import progress_bars_enabled
from training.cli.choices import LogLevelOpt
from training.cli.config_options import given_config, with_config_options
from training.cli.publish_options import PublishOptions
from training.cli.settings_options import collection_folder, collection_option
from training.cli.support import JsonOpt, QuietOpt, configure_command_output, echo_json, fail


class GateSplit(BaseModel):
    """`index`'s evaluation split (`pipeline` takes TrainConfig's eval_split)."""

    model_config = ConfigDict(extra="forbid")

    split: str = Field("test", description="qrels split for the gate metrics.")


@with_config_options(PublishOptions, GateSplit)
def index_cmd(
    model: Annotated[Path, typer.Option("--model", help="Training run folder (or its model/).")],
    data: Annotated[Path, typer.Option("--data", help="BEIR folder (or pairs file) with the corpus.")],
    bundles: Annotated[
        Path | None,
        typer.Option("--bundles", help="Bundles folder (versions + CURRENT); or give --collection."),
    ] = None,
    collection: Annotated[str | None, collection_option()] = None,
    log_level: LogLevelOpt = "INFO",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    **overrides: Any,
) -> None:
    configure_command_output(log_level, quiet=quiet)
    publish = given_config(PublishOptions, overrides)
    folder = collection_folder(bundles, collection, create=True)
    from training.publish.index_model import index_model  # heavy imports only when the command runs
    from training.train.run_hooks import RunHooks

    try:
        split = given_config(GateSplit, overrides).split
        plan = publish.plan(data, folder, eval_split=split, collection=collection)
        result = index_model(model, plan, RunHooks(show_progress=progress_bars_enabled()))
    except InfonceSearchError as exc:
        fail(str(exc))
    if as_json:
        echo_json(result.model_dump())
        return
    typer.echo(f"{result.version}: {'live' if result.live else 'candidate'} ({result.reason})")
