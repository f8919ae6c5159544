"""`python -m training …`: the command line of the offline side.

    python -m training train --data DIR --out DIR [--epochs 2 --hard-negatives 3 …] [--config FILE.json]

This module assembles the typer app; each command lives beside it (train: train, pipeline; index; report;
distill; bundles; jobs: jobs, worker). Every TrainConfig field is an option of `train` and `pipeline`, every
DistillConfig field one of `distill`, every PublishOptions field one of `index` and `pipeline`: generated from
the model with its description as help (training/cli/config_options.py), so the two cannot drift apart. Domain errors and invalid options end as one
line on stderr and exit code 2, never a traceback. Logging is configured here, once per command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from training.cli.bundles import bundles_app
from training.cli.choices import LogLevelOpt
from training.cli.distill import distill_cmd
from training.cli.feedback import feedback_cmd
from training.cli.index import index_cmd
from training.cli.jobs import jobs_app, worker
from training.cli.report import report_cmd
from training.cli.support import configure_command_output, fail
from training.cli.train import pipeline_cmd, train_cmd

app = typer.Typer(
    help="infonce-search offline tools: fine-tune an encoder with InfoNCE, report, index, publish.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: long flags are never cut in a narrow terminal
)


def demo_data_cmd(
    out: Annotated[Path, typer.Option("--out", help="Folder to write (replaced if it exists).")],
    docs: Annotated[
        int | None, typer.Option("--docs", min=2, help="Documents (= queries) in the corpus [default: 1100].")
    ] = None,
    test_queries: Annotated[
        int | None,
        typer.Option("--test-queries", min=1, help="Queries held out in qrels/test.tsv [default: 300]."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample and the train/test split.")] = 0,
    modules: Annotated[
        str | None,
        typer.Option(
            "--modules",
            help="Only these top-level standard-library packages, comma-separated (e.g. email,http,urllib): "
            "one package family, for a collection of its own.",
        ),
    ] = None,
    log_level: LogLevelOpt = "INFO",
) -> None:
    configure_command_output(log_level)
    from training.data.demo_data import DEFAULT_DOCS, DEFAULT_TEST_QUERIES, build_demo_dataset

    families = [m.strip() for m in modules.split(",") if m.strip()] if modules else None
    try:
        path = build_demo_dataset(
            out,
            n_docs=docs or DEFAULT_DOCS,
            n_test=test_queries or DEFAULT_TEST_QUERIES,
            seed=seed,
            modules=families,
        )
    except (ValueError, OSError) as exc:
        fail(f"demo-data: {exc}")
    typer.echo(f"demo dataset written to {path}")


def man_data_cmd(
    out: Annotated[Path, typer.Option("--out", help="Folder to write (replaced if it exists).")],
    docs: Annotated[
        int | None, typer.Option("--docs", min=2, help="Documents (= queries) in the corpus [default: 2500].")
    ] = None,
    test_queries: Annotated[
        int | None,
        typer.Option("--test-queries", min=1, help="Queries held out in qrels/test.tsv [default: 500]."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample and the train/test split.")] = 0,
    root: Annotated[
        Path | None, typer.Option("--root", help="Manual page folder [default: /usr/share/man].")
    ] = None,
    log_level: LogLevelOpt = "INFO",
) -> None:
    configure_command_output(log_level)
    from training.data.man_pages import DEFAULT_DOCS, DEFAULT_TEST_QUERIES, build_man_dataset

    try:
        path = build_man_dataset(
            out,
            n_docs=docs or DEFAULT_DOCS,
            n_test=test_queries or DEFAULT_TEST_QUERIES,
            seed=seed,
            root=root,
        )
    except (ValueError, OSError) as exc:
        fail(f"man-data: {exc}")
    typer.echo(f"manual-page dataset written to {path}")


app.command("train", help="Fine-tune the encoder on a dataset and print base-vs-tuned metrics.")(train_cmd)
app.command("index", help="Encode a corpus with a trained model, build a FAISS bundle and publish it.")(
    index_cmd
)
app.command("report", help="Regenerate the generalization-gap report (report.json + PNG plots) for a model.")(
    report_cmd
)
app.command(
    "demo-data", help="Build the demo dataset (BEIR folder) from this Python's standard-library docstrings."
)(demo_data_cmd)
app.command(
    "man-data",
    help="Build a dataset (BEIR folder) from the installed manual pages: NAME summary → DESCRIPTION.",
)(man_data_cmd)
app.command(
    "pipeline",
    help="Train, write the gap report, build the index and publish the bundle through the quality gate.",
)(pipeline_cmd)
app.add_typer(jobs_app, name="jobs")  # light: huey + pydantic, no torch
app.add_typer(bundles_app, name="bundles")
app.command(
    "distill", help="Train cheap query encoders into the live bundle's space; publish a new version."
)(distill_cmd)
app.command("worker", help="Run the job worker (huey consumer) until interrupted.")(worker)
app.command("feedback", help="Send a file of relevance judgments to a running server (POST /feedback).")(
    feedback_cmd
)


def _version(value: bool) -> None:
    if value:
        from importlib import metadata

        try:
            version = metadata.version("infonce-search")
        except metadata.PackageNotFoundError:  # a source checkout that was never installed
            version = "0+unknown"
        typer.echo(f"infonce-search {version}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """infonce-search offline tools."""


def main() -> None:
    """Console entry point (`infonce-search`, `python -m training`)."""
    app(prog_name="python -m training" if sys.argv and sys.argv[0].endswith("__main__.py") else None)
