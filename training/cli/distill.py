"""`python -m training distill`: add distilled query encoders to the live bundle, as a new version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from contract.errors import InfonceSearchError
from training.cli.choices import LogLevelOpt
from training.distill.config import DistillConfig

_DEFAULT = DistillConfig()  # the options' defaults are the config's, so the two cannot drift apart


def distill_cmd(
    bundles: Annotated[Path, typer.Option("--bundles", help="Bundles folder; its live bundle is used.")],
    data: Annotated[
        Path, typer.Option("--data", help="BEIR folder (or pairs file) of that bundle's corpus.")
    ],
    train_split: Annotated[str, typer.Option("--train-split", help="qrels split to train on.")] = "train",
    eval_split: Annotated[str, typer.Option("--eval-split", help="qrels split to score on.")] = "test",
    variants: Annotated[
        str, typer.Option("--variants", help="Comma-separated: distilled (truncated transformer), static.")
    ] = "distilled,static",
    layers: Annotated[
        int, typer.Option("--layers", help="Transformer layers the distilled encoder keeps.")
    ] = _DEFAULT.layers,
    epochs: Annotated[
        int, typer.Option("--epochs", help="Epochs of the distilled transformer.")
    ] = _DEFAULT.epochs,
    lr: Annotated[
        float, typer.Option("--lr", help="Learning rate of the distilled transformer.")
    ] = _DEFAULT.lr,
    static_epochs: Annotated[
        int, typer.Option("--static-epochs", help="Epochs of the static table.")
    ] = _DEFAULT.static_epochs,
    match_weight: Annotated[
        float, typer.Option("--match-weight", help="Weight of 1 - cos(student, full) (0 = InfoNCE only).")
    ] = _DEFAULT.match_weight,
    title_queries: Annotated[
        int, typer.Option("--title-queries", help="Documents' titles as pseudo-queries.")
    ] = _DEFAULT.title_queries,
    sentence_queries: Annotated[
        int, typer.Option("--sentence-queries", help="Documents' sentences as pseudo-queries.")
    ] = _DEFAULT.sentence_queries,
    sentences_per_doc: Annotated[
        int, typer.Option("--sentences-per-doc", help="Sentences drawn from each of those documents.")
    ] = _DEFAULT.sentences_per_doc,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Stop each variant early.")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Publish as live even if the gate rejects it.")
    ] = False,
    log_level: LogLevelOpt = "INFO",
) -> None:
    from training.cli.support import configure_logging, fail

    configure_logging(log_level)
    from pydantic import ValidationError

    from training.data.split import load_split
    from training.distill.bundle_step import distill_live_bundle

    try:
        config = DistillConfig(
            variants=[v.strip() for v in variants.split(",") if v.strip()],
            layers=layers,
            epochs=epochs,
            lr=lr,
            static_epochs=static_epochs,
            match_weight=match_weight,
            title_queries=title_queries,
            sentence_queries=sentence_queries,
            sentences_per_doc=sentences_per_doc,
            max_steps=max_steps,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"--{'-'.join(str(p) for p in err['loc'][:1]).replace('_', '-')}: {err['msg']}")
    try:
        result = distill_live_bundle(
            bundles, load_split(data, train_split), load_split(data, eval_split), config=config, force=force
        )
    except InfonceSearchError as exc:
        fail(str(exc))
    typer.echo(f"{result.version}: {'live' if result.live else 'candidate'} ({result.reason})")
