"""`python -m training …`: the command line of the offline side.

    python -m training train --data DIR --out DIR [--epochs 2 --hard-negatives 1 …] [--config FILE.json]

Every TrainConfig field is an option of `train` (built from the model, so the two cannot drift apart;
`HELP` explains each one). Domain errors and invalid options end as one line on stderr and exit code 2,
never a traceback. Logging is configured here, once.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from contract.config import TrainConfig
from contract.errors import InfonceSearchError
from training.cli_choices import IndexOpt, LogLevelOpt
from training.cli_support import configure_logging, fail, validation_message

logger = logging.getLogger(__name__)

app = typer.Typer(
    help="infonce-search offline tools: fine-tune an encoder with InfoNCE, report, index, publish.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: long flags are never cut in a narrow terminal
)

HELP: dict[str, str] = {
    "train_split": "qrels/<split>.tsv of a BEIR folder used for training (a pairs file: 'train').",
    "eval_split": "qrels/<split>.tsv with the held-out queries for base-vs-tuned metrics and the gap report.",
    "base_model": "Local sentence-transformers model folder to start from; default: the packaged all-MiniLM-L6-v2.",
    "max_seq_length": "Token limit while training (longer texts are cut). Evaluation and the saved model keep "
    "the base model's own limit; shorter training inputs are much cheaper on CPU.",
    "corpus_title_pairs": "Add n unsupervised pairs from the corpus itself: a document's title as a pseudo-query "
    "for its body text (title removed). Uses no queries or labels, only the corpus that gets indexed.",
    "corpus_sentence_pairs": "Add n unsupervised pairs from the corpus: one sentence of a document as a "
    "pseudo-query for the rest of it (inverse cloze).",
    "validation_fraction": "Share of the training queries held out (seeded) and not trained on: it chooses the "
    "bundle's default search mode and hybrid fusion parameters. 0 = train on all (hybrid stays untuned).",
    "loss": "infonce (cosine / τ logits) or aninfonce (learned diagonal Λ, served as L2 on √Λ-scaled vectors).",
    "temperature": "InfoNCE temperature τ (MultipleNegativesRankingLoss scale = 1/τ); AnInfoNCE starts at Λ = 1/τ.",
    "learn_temperature": "Learn τ (as log 1/τ, CLIP-style, 1/τ capped at 100) at --lambda-lr; the final τ is saved.",
    "symmetric": "Average the query→document and document→query cross-entropies.",
    "decoupled": "Decoupled contrastive loss: the positive is left out of the denominator (Yeh et al. 2022).",
    "debiased_tau_plus": "Debiased contrastive loss with class prior τ⁺ (Chuang et al. 2020); 0 disables.",
    "lambda_lr": "Learning rate of the loss's own parameters: AnInfoNCE's w (Λ = softplus(w)) or a learned τ.",
    "random_negatives": "Extra negatives per batch: k corpus documents drawn uniformly (never a batch query's positive).",
    "hard_negatives": "Mined negatives per training pair, ranked by the base model (0 disables mining).",
    "hard_negative_rank_min": "Skip ranks below this when mining: the very top often holds unlabelled positives.",
    "hard_negative_rank_max": "Sample hard negatives among the ranks [rank-min, rank-max).",
    "hard_negative_margin": "Drop candidates scoring above (positive's score − margin): likely false negatives.",
    "epochs": "Passes over the training pairs.",
    "batch_size": "(query, positive) pairs per step; each query sees batch-size − 1 in-batch negatives.",
    "lr": "Peak learning rate of the encoder (AdamW).",
    "weight_decay": "AdamW weight decay (not applied to biases and LayerNorm weights).",
    "warmup_ratio": "Share of the steps with a linear learning-rate warmup; then linear decay to 0.",
    "max_grad_norm": "Clip the encoder's gradient norm at this value; 0 disables clipping.",
    "grad_cache": "GradCache (Gao et al. 2021): exact large-batch gradients with the memory of --mini-batch-size.",
    "mini_batch_size": "Texts embedded at once under --grad-cache.",
    "max_steps": "Stop after this many optimiser steps (smoke runs); the schedule is fitted to it.",
    "seed": "Seed of python, numpy and torch: batches, negatives and dropout are reproducible.",
    "device": "auto (cuda when torch sees a GPU, else cpu), cpu or cuda. On cuda: bf16 autocast (fp16 with a "
    "grad scaler where bf16 is unsupported); on cpu: fp32, exactly as before.",
    "eval_max_queries": "Evaluate on a seeded subsample of this many held-out queries (quick runs).",
    "report": "Compute the generalization-gap report into OUT/report/ after training.",
}


QuietOpt = Annotated[
    bool, typer.Option("--quiet", help="No progress bars at all (the libraries' loading bars included).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (logs stay on stderr).")]


def echo_json(data: Any) -> None:
    """`--json`: the command's result as one JSON document on stdout (logs stay on stderr)."""
    typer.echo(json.dumps(data, indent=2, default=str))


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


def metrics_table(base: dict[str, float], tuned: dict[str, float]) -> str:
    names = [n for n in ("ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100") if n in base]
    lines = [f"{'metric':<11}{'base':>8}{'tuned':>8}{'change':>9}"]
    lines += [f"{n:<11}{base[n]:>8.4f}{tuned[n]:>8.4f}{tuned[n] - base[n]:>+9.4f}" for n in names]
    return "\n".join(lines)


def _prepare_run(
    data: Path, config_file: Path | None, log_level: str, overrides: dict[str, Any], *, quiet: bool = False
) -> TrainConfig:
    """What `train` and `pipeline` do before a run: logging, the config, a dataset that exists."""
    configure_logging(log_level, quiet=quiet)
    config = load_config(config_file, overrides)
    if not data.exists():
        fail(f"--data {data}: no such file or folder (expected a BEIR folder or a pairs JSONL file)")
    return config


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    """Domain and validation errors end the command as one line on stderr (exit 2), never a traceback."""
    try:
        yield
    except InfonceSearchError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(validation_message(exc))


def _train(
    data: Path,
    out: Path,
    config_file: Path | None,
    log_level: str,
    quiet: bool,
    as_json: bool,
    **overrides: Any,
) -> None:
    config = _prepare_run(data, config_file, log_level, overrides, quiet=quiet)
    from training.trainer import train  # torch and friends load only when a run starts

    with _one_line_errors():
        result = train(config, data, out, show_progress=not quiet)
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
    typer.echo(metrics_table(result.base_metrics, result.tuned_metrics))
    typer.echo(
        f"trained in {result.train_seconds:.0f}s; model in {result.model_dir}, metrics in {result.metrics_path}"
    )


def _option_type(annotation: Any) -> Any:
    """The click-friendly type of a TrainConfig field: `X | None` → X; a Literal stays one (typer shows
    and checks its values, e.g. --loss, --device)."""
    if typing.get_origin(annotation) is typing.Literal:
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _option_type(inner[0])
    return annotation


def _train_signature() -> inspect.Signature:
    fixed = [
        inspect.Parameter(
            "data",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[
                Path,
                typer.Option(
                    "--data",
                    help="BEIR folder (corpus.jsonl, queries.jsonl, "
                    "qrels/<split>.tsv) or a pairs JSONL file.",
                ),
            ],
        ),
        inspect.Parameter(
            "out",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[
                Path,
                typer.Option(
                    "--out",
                    help="Output folder: model/, config.json, metrics.json, train_log.jsonl, report/.",
                ),
            ],
        ),
        inspect.Parameter(
            "config_file",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                Path | None,
                typer.Option(
                    "--config",
                    help="JSON file of TrainConfig fields (or a run's config.json); explicit options win.",
                ),
            ],
        ),
        inspect.Parameter(
            "log_level", inspect.Parameter.KEYWORD_ONLY, default="INFO", annotation=LogLevelOpt
        ),
        inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=QuietOpt),
        inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=JsonOpt),
    ]
    return inspect.Signature(fixed + _config_parameters())


def _config_parameters() -> list[inspect.Parameter]:
    """One keyword option per TrainConfig field (default None = keep the config's value)."""
    fields = []
    for name, field in TrainConfig.model_fields.items():
        kind = _option_type(field.annotation)
        flag = f"--{name.replace('_', '-')}"
        flags = [f"{flag}/--no-{name.replace('_', '-')}"] if kind is bool else [flag]
        default = field.default
        help_text = f"{HELP[name]} [default: {default}]"
        fields.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[kind | None, typer.Option(*flags, help=help_text, show_default=False)],
            )
        )
    return fields


_train.__signature__ = _train_signature()  # type: ignore[attr-defined]
_train.__annotations__ = {p.name: p.annotation for p in _train.__signature__.parameters.values()}  # type: ignore[attr-defined]
app.command("train", help="Fine-tune the encoder on a dataset and print base-vs-tuned metrics.")(_train)


ONNX_HELP = "Export + score the ONNX query encoders into the bundle."
DISTILL_HELP = (
    "Also train the distilled query encoders (2-layer transformer, static table) with default settings; "
    "`python -m training distill` has every knob."
)


def _distill_config(distill: bool) -> Any:
    from training.distill import DistillConfig

    return DistillConfig() if distill else None


IndexBackendOpt = Annotated[
    str,
    typer.Option("--index-backend", envvar="SEARCH_INDEX_BACKEND", help="faiss (in the bundle) or milvus."),
]
MilvusUriOpt = Annotated[
    str | None,
    typer.Option(
        "--milvus-uri", envvar="SEARCH_MILVUS_URI", help="http://host:19530 or a milvus-lite .db path."
    ),
]
MilvusTokenOpt = Annotated[
    str | None, typer.Option("--milvus-token", envvar="SEARCH_MILVUS_TOKEN", help="Milvus credentials.")
]
MilvusNameOpt = Annotated[
    str,
    typer.Option(
        "--milvus-name", envvar="SEARCH_MILVUS_NAME", help="Collections <name>_v<version>, alias <name>_live."
    ),
]


def _backend(backend: str, uri: str | None, token: str | None, name: str) -> Any:
    """The index backend options as a contract.index_backend.BackendConfig (ConfigError when inconsistent)."""
    from contract.index_backend import BackendConfig

    return BackendConfig(backend=backend, milvus_uri=uri, milvus_token=token, milvus_name=name)  # type: ignore[arg-type]


@app.command("index", help="Encode a corpus with a trained model, build a FAISS bundle and publish it.")
def index_cmd(
    model: Annotated[Path, typer.Option("--model", help="Training run folder (or its model/).")],
    data: Annotated[Path, typer.Option("--data", help="BEIR folder (or pairs file) with the corpus.")],
    bundles: Annotated[Path, typer.Option("--bundles", help="Bundles folder (versions + CURRENT).")],
    index: IndexOpt = "auto",
    target_recall: Annotated[float, typer.Option("--target-recall", help="ANN recall@10 to tune to.")] = 0.95,
    split: Annotated[str, typer.Option("--split", help="qrels split for the gate metrics.")] = "test",
    force: Annotated[
        bool, typer.Option("--force", help="Publish as live even if the gate rejects it.")
    ] = False,
    keep: Annotated[int, typer.Option("--keep", help="Versions kept (the live one always is).")] = 5,
    distill: Annotated[bool, typer.Option("--distill", help=DISTILL_HELP)] = False,
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help=ONNX_HELP)] = True,
    log_level: LogLevelOpt = "INFO",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    index_backend: IndexBackendOpt = "faiss",
    milvus_uri: MilvusUriOpt = None,
    milvus_token: MilvusTokenOpt = None,
    milvus_name: MilvusNameOpt = "infonce",
) -> None:
    configure_logging(log_level, quiet=quiet)
    from training.publish import index_model  # heavy imports only when the command runs

    try:
        backend = _backend(index_backend, milvus_uri, milvus_token, milvus_name)
        result = index_model(
            model,
            data,
            bundles,
            index_kind=index,
            target_recall=target_recall,
            split=split,
            force=force,
            keep=keep,
            distill=_distill_config(distill),
            onnx=onnx,
            show_progress=not quiet,
            backend=backend,
        )
    except InfonceSearchError as exc:
        fail(str(exc))
    if as_json:
        echo_json(result.model_dump())
        return
    typer.echo(f"{result.version}: {'live' if result.live else 'candidate'} ({result.reason})")


@app.command("report", help="Regenerate the generalization-gap report (report.json + PNG plots) for a model.")
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
    configure_logging(log_level, quiet=quiet)
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


@app.command(
    "demo-data",
    help="Build the demo dataset (BEIR folder) from this Python's standard-library docstrings.",
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
    log_level: LogLevelOpt = "INFO",
) -> None:
    configure_logging(log_level)
    from training.demo_data import DEFAULT_DOCS, DEFAULT_TEST_QUERIES, build_demo_dataset

    try:
        path = build_demo_dataset(
            out, n_docs=docs or DEFAULT_DOCS, n_test=test_queries or DEFAULT_TEST_QUERIES, seed=seed
        )
    except (ValueError, OSError) as exc:
        fail(f"demo-data: {exc}")
    typer.echo(f"demo dataset written to {path}")


def _option(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _pipeline(
    data: Path,
    bundles: Path,
    work_dir: Path,
    index: str,
    target_recall: float,
    force: bool,
    keep: int,
    onnx: bool,
    distill: bool,
    config_file: Path | None,
    log_level: str,
    quiet: bool,
    as_json: bool,
    index_backend: str = "faiss",
    milvus_uri: str | None = None,
    milvus_token: str | None = None,
    milvus_name: str = "infonce",
    **overrides: Any,
) -> None:
    config = _prepare_run(data, config_file, log_level, overrides, quiet=quiet)
    from training.pipeline import run_pipeline  # torch and friends load only when a run starts

    with _one_line_errors():
        backend = _backend(index_backend, milvus_uri, milvus_token, milvus_name)
        result = run_pipeline(
            data,
            bundles,
            config=config,
            work_dir=work_dir,
            index_kind=index,
            target_recall=target_recall,
            force=force,
            keep=keep,
            onnx=onnx,
            distill=_distill_config(distill),
            show_progress=not quiet,
            backend=backend,
        )
    if as_json:
        echo_json(
            {
                "base": result.train.base_metrics,
                "tuned": result.train.tuned_metrics,
                "publish": result.publish.model_dump(),
                "phase_seconds": result.timer.seconds,
                "seconds": result.seconds,
                "run_dir": result.run_dir,
            }
        )
        return
    typer.echo(metrics_table(result.train.base_metrics, result.train.tuned_metrics))
    published = result.publish
    state = "live" if published.live else "kept as a candidate"
    typer.echo(f"bundle {published.version} {state} ({published.reason})")
    typer.echo(result.timer.table())
    typer.echo(
        f"run folder {result.run_dir} (phase times in timings.json); pipeline took {result.seconds:.0f}s"
    )


_pipeline.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        _option("data", Annotated[Path, typer.Option("--data", help="BEIR folder or pairs JSONL file.")]),
        _option(
            "bundles", Annotated[Path, typer.Option("--bundles", help="Bundles folder (versions + CURRENT).")]
        ),
        _option(
            "work_dir",
            Annotated[Path, typer.Option("--work-dir", help="Where training run folders are written.")],
            Path("runs"),
        ),
        _option("index", IndexOpt, "auto"),
        _option(
            "target_recall",
            Annotated[
                float, typer.Option("--target-recall", help="ANN recall@10 vs exact search to tune to.")
            ],
            0.95,
        ),
        _option(
            "force",
            Annotated[
                bool,
                typer.Option("--force", help="Make the bundle live even if the quality gate rejects it."),
            ],
            False,
        ),
        _option(
            "keep", Annotated[int, typer.Option("--keep", help="Versions kept (the live one always is).")], 5
        ),
        _option(
            "onnx",
            Annotated[
                bool,
                typer.Option("--onnx/--no-onnx", help=ONNX_HELP),
            ],
            True,
        ),
        _option("distill", Annotated[bool, typer.Option("--distill", help=DISTILL_HELP)], False),
        _option(
            "config_file",
            Annotated[
                Path | None,
                typer.Option("--config", help="JSON file of TrainConfig fields; explicit options win."),
            ],
            None,
        ),
        _option("log_level", LogLevelOpt, "INFO"),
        _option("quiet", QuietOpt, False),
        _option("as_json", JsonOpt, False),
        _option("index_backend", IndexBackendOpt, "faiss"),
        _option("milvus_uri", MilvusUriOpt, None),
        _option("milvus_token", MilvusTokenOpt, None),
        _option("milvus_name", MilvusNameOpt, "infonce"),
        *_config_parameters(),
    ]
)
_pipeline.__annotations__ = {p.name: p.annotation for p in _pipeline.__signature__.parameters.values()}  # type: ignore[attr-defined]
app.command(
    "pipeline",
    help="Train, write the gap report, build the index and publish the bundle through the quality gate.",
)(_pipeline)


# jobs submit|status|list|cancel and the worker (training/jobs/cli.py; light: huey + pydantic, no torch)
from training.jobs.cli import jobs_app, worker  # noqa: E402

app.add_typer(jobs_app, name="jobs")
from training.bundles_cli import bundles_app  # noqa: E402

app.add_typer(bundles_app, name="bundles")
from training.distill_cli import distill_cmd  # noqa: E402

app.command(
    "distill", help="Train cheap query encoders into the live bundle's space; publish a new version."
)(distill_cmd)
app.command("worker", help="Run the job worker (huey consumer) until interrupted.")(worker)


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
