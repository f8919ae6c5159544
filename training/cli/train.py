"""`python -m training train` and `pipeline`: the commands that run training. Their training options are
generated from TrainConfig (training/cli/config_options.py); torch loads only once a run starts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field

from contract.config import TrainConfig
from contract.jobs.plan import (
    CLI_SCOPE,
    START_FROM_HELP,
    DataPlan,
    FeedbackUse,
    PublicationPlan,
    PublishPlan,
    RetrainPlan,
    RetrainScope,
    StartFrom,
    retrain_plan,
    scope_of,
)
from contract.log_setup import progress_bars_enabled
from contract.query_config import QueryRetrainConfig
from training.cards.metrics_table import text_table
from training.cli.choices import LogLevelOpt
from training.cli.config_options import ConfigFileOpt, given_config, load_config, with_config_options
from training.cli.publish_options import PublishOptions
from training.cli.settings_options import collection_folder, collection_option
from training.cli.support import JsonOpt, QuietOpt, configure_command_output, echo_json, fail, one_line_errors

if TYPE_CHECKING:
    from training.publish.pipeline import PipelineResult

DataOpt = Annotated[
    Path,
    typer.Option(
        "--data", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) or a pairs JSONL file."
    ),
]


def _prepare_run(
    data: Path, config_file: Path | None, log_level: str, overrides: dict[str, Any], *, quiet: bool = False
) -> TrainConfig:
    """What `train` and `pipeline` do before a run: logging, the config, a dataset that exists."""
    configure_command_output(log_level, quiet=quiet)
    config = load_config(config_file, overrides)
    if not data.exists():
        fail(f"--data {data}: no such file or folder (expected a BEIR folder or a pairs JSONL file)")
    return config


class ScopeOptions(BaseModel):
    """What `train` and `pipeline` retrain (contract/jobs/plan.py); `--tower` is its old name."""

    model_config = ConfigDict(extra="forbid")

    retrain_scope: RetrainScope | None = Field(
        None,
        description="What is retrained: full (both towers, the corpus encoded again), query (only a query "
        "tower against the live bundle's fixed document vectors and index: no corpus encode), or auto (query "
        "when a live FAISS bundle of a cosine model holds this dataset's documents unchanged, else full).",
        json_schema_extra={"shown_default": CLI_SCOPE},
    )
    tower: RetrainScope | None = Field(None, description="Deprecated: the old name of --retrain-scope.")

    def scope(self) -> RetrainScope:
        return scope_of(self.retrain_scope, self.tower, CLI_SCOPE)


class FeedbackOptions(BaseModel):
    """What `pipeline` does with the relevance judgments in the bundles folder (training/feedback/), and the
    model it fine-tunes (training/publish/start_model.py)."""

    model_config = ConfigDict(extra="forbid")

    feedback: FeedbackUse | None = Field(
        None,
        description="The judgments sent to POST /feedback for this collection: include (they train beside "
        "the dataset's pairs, 20% of the judged queries held out and gated on), only (they alone train), "
        "exclude. Unset: include when there are positive judgments.",
    )
    start_from: StartFrom = Field("base", description=START_FROM_HELP)


@with_config_options(TrainConfig, QueryRetrainConfig, ScopeOptions)
def train_cmd(
    data: DataOpt,
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Output folder: model/, config.json, metrics.json, train_log.jsonl, report/."
        ),
    ],
    config_file: ConfigFileOpt = None,
    log_level: LogLevelOpt = "INFO",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    bundles: Annotated[
        Path | None,
        typer.Option(
            "--bundles",
            help="With --retrain-scope query (or auto): the bundles folder whose live bundle's fixed documents "
            "the query tower trains against; OUT/model is then a two-tower folder and nothing is published "
            "(`pipeline` publishes).",
        ),
    ] = None,
    **overrides: Any,
) -> None:
    config = _prepare_run(data, config_file, log_level, overrides, quiet=quiet)
    plan = _query_side_plan(config, data, bundles, overrides)
    if plan is not None:
        _train_query_tower(plan, out, as_json)
        return
    from training.export.corpus_encoder import corpus_encoder_for
    from training.train.run_hooks import RunHooks
    from training.train.trainer import train  # torch and friends load only when a run starts

    with one_line_errors():
        hooks = RunHooks(show_progress=progress_bars_enabled())
        result = train(config, data, out, hooks=hooks, corpus_encoder=corpus_encoder_for)
    if as_json:
        echo_json(
            {
                "base": result.base_metrics,
                "tuned": result.tuned_metrics,
                "train_seconds": result.train_seconds,
                "out_dir": result.out_dir,
                "model_dir": result.model_dir,
                "metrics_path": result.metrics_path,
                "report_dir": result.report_dir,
            }
        )
        return
    typer.echo(text_table(result.base_metrics, result.tuned_metrics))
    typer.echo(
        f"trained in {result.train_seconds:.0f}s; model in {result.model_dir}, metrics in {result.metrics_path}"
    )


def _query_side_plan(
    config: TrainConfig, data: Path, bundles: Path | None, overrides: dict[str, Any]
) -> RetrainPlan | None:
    """`train`'s plan when it trains only a query tower (its scope resolved against the live bundle of
    `bundles`), else None: a full training run."""
    scope = given_config(ScopeOptions, overrides).scope()
    if scope == "full":
        return None
    if bundles is None:
        fail(f"--retrain-scope {scope} needs --bundles: the live bundle whose documents stay fixed")
    from training.publish.pipeline import resolve_scope

    where = PublishPlan(
        data=DataPlan(data_dir=str(data)), publication=PublicationPlan(bundles_dir=str(bundles))
    )
    plan = resolve_scope(retrain_plan(config, given_config(QueryRetrainConfig, overrides), where, scope))
    return plan if plan.scope == "query" else None


def _train_query_tower(plan: RetrainPlan, out: Path, as_json: bool) -> None:
    """`train --retrain-scope query`: the query tower trained against the live bundle, written to OUT,
    unpublished."""
    from training.distill.query_retrain import query_side_retrain

    with one_line_errors():
        done = query_side_retrain(plan, out, publish=False)
    if as_json:
        echo_json({"base": done.base_metrics, "tuned": done.tuned_metrics, "train_seconds": done.loop.seconds,
                   "out_dir": out, "model_dir": out / "model", "parent": done.parent})  # fmt: skip
        return
    typer.echo(
        f"query tower vs the live bundle {done.parent}'s query encoder (its documents, not encoded again):"
    )
    typer.echo(text_table(done.base_metrics, done.tuned_metrics))
    typer.echo(
        f"trained in {done.loop.seconds:.0f}s; two-tower model in {out / 'model'}, metrics in {out / 'metrics.json'}"
    )


class RunFolder(BaseModel):
    """Where `pipeline` writes its training run folders."""

    model_config = ConfigDict(extra="forbid")

    work_dir: Path = Field(Path("runs"), description="Where training run folders are written.")


@with_config_options(
    PublishOptions, TrainConfig, QueryRetrainConfig, ScopeOptions, FeedbackOptions, RunFolder
)
def pipeline_cmd(
    data: DataOpt,
    bundles: Annotated[
        Path | None,
        typer.Option("--bundles", help="Bundles folder (versions + CURRENT); or give --collection."),
    ] = None,
    collection: Annotated[str | None, collection_option()] = None,
    config_file: ConfigFileOpt = None,
    log_level: LogLevelOpt = "INFO",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    **overrides: Any,
) -> None:
    config = _prepare_run(data, config_file, log_level, overrides, quiet=quiet)
    publish = given_config(PublishOptions, overrides)
    query = given_config(QueryRetrainConfig, overrides)
    folder = collection_folder(bundles, collection, create=True)
    from training.publish.pipeline import run_pipeline  # torch and friends load only when a run starts
    from training.train.run_hooks import RunHooks

    with one_line_errors():
        scope = given_config(ScopeOptions, overrides).scope()
        learn = given_config(FeedbackOptions, overrides)
        publish_plan = publish.plan(data, folder, collection=collection)
        plan = retrain_plan(config, query, publish_plan, scope, learn.feedback, learn.start_from)
        work_dir = given_config(RunFolder, overrides).work_dir
        result = run_pipeline(plan, work_dir, RunHooks(show_progress=progress_bars_enabled()))
    _print_pipeline(result, as_json)


def _print_pipeline(result: PipelineResult, as_json: bool) -> None:
    """The pipeline's outcome: metrics, the bundle's fate and each phase's wall time (or all as JSON)."""
    if as_json:
        echo_json(
            {
                "base": result.train.base_metrics,
                "tuned": result.train.tuned_metrics,
                "publish": result.publish.model_dump(),
                "retrain_scope": result.scope,
                "tower": result.scope,  # the scope's old name, for readers of earlier output
                "feedback": result.feedback,
                "phase_seconds": result.timer.seconds,
                "seconds": result.seconds,
                "run_dir": result.run_dir,
            }
        )
        return
    if result.scope == "query":
        typer.echo("query-side retrain: base = the live bundle's query encoder, documents not encoded again")
    typer.echo(text_table(result.train.base_metrics, result.train.tuned_metrics))
    published = result.publish
    state = "live" if published.live else "kept as a candidate"
    typer.echo(f"bundle {published.version} {state} ({published.reason})")
    if result.feedback is not None:
        typer.echo(f"feedback {result.feedback['use']} ({result.feedback['reason']})")
    typer.echo(result.timer.table())
    typer.echo(
        f"run folder {result.run_dir} (phase times in timings.json); pipeline took {result.seconds:.0f}s"
    )
