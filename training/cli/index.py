"""`python -m training index`, and the publishing options it shares with `pipeline`: where the vectors
go (FAISS in the bundle, or Milvus), the ONNX and distilled query encoders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from contract.errors import InfonceSearchError
from training.cli.choices import IndexOpt, LogLevelOpt
from training.cli.settings_options import job_settings, setting_option
from training.cli.support import JsonOpt, QuietOpt, configure_logging, echo_json, fail

OnnxOpt = Annotated[
    bool, typer.Option("--onnx/--no-onnx", help="Export + score the ONNX query encoders into the bundle.")
]
DistillOpt = Annotated[
    bool,
    typer.Option(
        "--distill",
        help="Also train the distilled query encoders (2-layer transformer, static table) with default "
        "settings; `python -m training distill` has every knob.",
    ),
]
KeepOpt = Annotated[int, typer.Option("--keep", help="Versions kept (the live one always is).")]
IndexBackendOpt = Annotated[
    str,
    typer.Option("--index-backend", envvar="SEARCH_INDEX_BACKEND", help="faiss (in the bundle) or milvus."),
]
# the Milvus options are the API's settings (JobSettings): given ones win, the rest come from SEARCH_*
MilvusUriOpt = Annotated[
    str | None,
    setting_option("milvus_uri", "--milvus-uri", help="http://host:19530 or a milvus-lite .db path."),
]
MilvusTokenOpt = Annotated[
    str | None, setting_option("milvus_token", "--milvus-token", help="Milvus credentials.")
]
MilvusNameOpt = Annotated[
    str | None,
    setting_option("milvus_name", "--milvus-name", help="Collections <name>_v<version>, alias <name>_live."),
]


def distill_config(distill: bool) -> Any:
    """`--distill`: the distillation's default DistillConfig, or None (no distilled encoders)."""
    from training.distill.config import DistillConfig

    return DistillConfig() if distill else None


def backend_config(backend: str, uri: str | None, token: str | None, name: str | None) -> Any:
    """The index backend options as a contract.index.backend.BackendConfig (ConfigError when inconsistent)."""
    from contract.index.backend import BackendConfig

    s = job_settings(milvus_uri=uri, milvus_token=token, milvus_name=name)
    milvus = {"milvus_uri": s.milvus_uri, "milvus_token": s.milvus_token, "milvus_name": s.milvus_name}
    return BackendConfig(backend=backend, **milvus)  # type: ignore[arg-type]


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
    keep: KeepOpt = 5,
    distill: DistillOpt = False,
    onnx: OnnxOpt = True,
    log_level: LogLevelOpt = "INFO",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    index_backend: IndexBackendOpt = "faiss",
    milvus_uri: MilvusUriOpt = None,
    milvus_token: MilvusTokenOpt = None,
    milvus_name: MilvusNameOpt = None,
) -> None:
    configure_logging(log_level, quiet=quiet)
    from training.publish.index_model import index_model  # heavy imports only when the command runs

    try:
        backend = backend_config(index_backend, milvus_uri, milvus_token, milvus_name)
        result = index_model(
            model,
            data,
            bundles,
            index_kind=index,
            target_recall=target_recall,
            split=split,
            force=force,
            keep=keep,
            distill=distill_config(distill),
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
