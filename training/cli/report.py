"""`python -m training report`: regenerate the generalization-gap report (report.json + PNG plots)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from contract.errors import InfonceSearchError
from training.cli.choices import LogLevelOpt
from training.cli.support import JsonOpt, QuietOpt, configure_command_output, echo_json, fail


def report_cmd(
    data: Annotated[
        Path, typer.Option("--data", help="BEIR folder (or pairs file) with train and test qrels.")
    ],
    model: Annotated[
        Path | None, typer.Option("--model", help="Training run folder (or its model/); default: base model.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Report folder; default: <run>/report for a training run.")
    ] = None,
    k: Annotated[
        int | None, typer.Option("--k", help="Negatives per anchor; default: the run's training k.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed of negatives and bootstrap; default: the run's seed.")
    ] = None,
    log_level: LogLevelOpt = "INFO",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    configure_command_output(log_level, quiet=quiet)
    from training.gap.report import run_report  # heavy imports only when the command runs

    try:
        path = run_report(model, data, out, k=k, seed=seed)
    except InfonceSearchError as exc:
        fail(str(exc))
    if as_json:
        report = json.loads(path.read_text(encoding="utf-8"))
        echo_json(
            {
                "path": path,
                "k": report.get("k"),
                **{n: report.get(n) for n in ("risk_train", "risk_test", "gap")},
            }
        )
        return
    typer.echo(f"report written to {path}")
