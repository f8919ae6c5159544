"""`python -m training distill`: add distilled query encoders to the live bundle, as a new version. Every
DistillConfig field is an option, generated from the model with its description as help
(training/cli/config_options.py), so the two cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from contract.errors import InfonceSearchError
from training.cli.choices import LogLevelOpt
from training.cli.config_options import given_config, with_config_options
from training.cli.settings_options import collection_folder, collection_option
from training.cli.support import configure_command_output, fail
from training.distill.config import DistillConfig


@with_config_options(DistillConfig)
def distill_cmd(
    data: Annotated[
        Path, typer.Option("--data", help="BEIR folder (or pairs file) of that bundle's corpus.")
    ],
    bundles: Annotated[
        Path | None, typer.Option("--bundles", help="Bundles folder; its live bundle is used.")
    ] = None,
    collection: Annotated[str | None, collection_option()] = None,
    train_split: Annotated[str, typer.Option("--train-split", help="qrels split to train on.")] = "train",
    eval_split: Annotated[str, typer.Option("--eval-split", help="qrels split to score on.")] = "test",
    force: Annotated[
        bool, typer.Option("--force", help="Publish as live even if the gate rejects it.")
    ] = False,
    log_level: LogLevelOpt = "INFO",
    **overrides: Any,
) -> None:
    configure_command_output(log_level)
    config = given_config(DistillConfig, overrides)
    from training.data.split import load_split  # heavy imports only when the command runs
    from training.distill.bundle_step import distill_live_bundle

    try:
        result = distill_live_bundle(
            collection_folder(bundles, collection),
            load_split(data, train_split),
            load_split(data, eval_split),
            config=config,
            force=force,
        )
    except InfonceSearchError as exc:
        fail(str(exc))
    typer.echo(f"{result.version}: {'live' if result.live else 'candidate'} ({result.reason})")
