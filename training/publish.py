"""`python -m training index`: encode a corpus with a trained model, build the bundle, publish it.

The test metrics that drive the quality gate are measured with exact search (training.evaluate), so the
gate judges the model, not the ANN approximation; the index's own recall@10 against exact search is
measured on the real test queries and recorded in the manifest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.bundle import MANIFEST_FILE, read_manifest
from contract.encoder import Encoder
from contract.errors import ConfigError
from contract.index_backend import MILVUS_EXTRAS, BackendConfig
from contract.milvus_index import MilvusPointer, drop_collection
from contract.mutation_log import SEQ_KEY
from training.bundle_build import build_bundle
from training.bundle_store import FINGERPRINT_KEY, BundleStore, PublishResult, evaluation_fingerprint
from training.data import load_split
from training.embedding_cache import EmbeddingCache
from training.evaluate import EvalResult, encode_corpus, evaluate
from training.fold import fold_log
from training.index_factory import KINDS
from training.lexical_step import attach_lexical, validation_split
from training.milvus_publish import milvus_builder
from training.onnx_export import attach_onnx
from training.timing import PhaseTimer, phase

if TYPE_CHECKING:
    from training.distill_config import DistillConfig

logger = logging.getLogger(__name__)

RUN_CONFIG = "config.json"
RUN_METRICS = "metrics.json"
RUN_REPORT = "report"


def resolve_run(model_dir: str | Path) -> tuple[Path, Path | None]:
    """(model folder, run or bundle folder or None): accepts `<run>`, `<run>/model`, `<bundle>/model`
    or a bare sentence-transformers folder."""
    path = Path(model_dir)
    if (path / "model").is_dir():
        return path / "model", path
    if any((path.parent / name).is_file() for name in (RUN_CONFIG, RUN_METRICS, MANIFEST_FILE)):
        return path, path.parent  # a run's model/ or a published bundle's model/
    return path, None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def _base_model_name(training_config: dict[str, Any]) -> str:
    """The base model's name: a run's config.json records {path, name, package}; older ones a string."""
    base = training_config.get("base_model") or "all-MiniLM-L6-v2"
    if isinstance(base, dict):
        return str(base.get("name") or base.get("path") or "all-MiniLM-L6-v2")
    return str(base)


def index_model(
    model_dir: str | Path | None,
    data_dir: str | Path,
    bundles_dir: str | Path,
    *,
    index_kind: str = "auto",
    target_recall: float = 0.95,
    split: str = "test",
    force: bool = False,
    keep: int = 5,
    gate_metric: str = "ndcg@10",
    tolerance: float = 0.005,
    memory_budget_bytes: int | None = None,
    onnx: bool = True,
    distill: DistillConfig | None = None,
    distill_split: str = "train",
    evaluation: EvalResult | None = None,
    show_progress: bool = True,
    checkpoint: Callable[[], None] | None = None,
    timer: PhaseTimer | None = None,
    cache: EmbeddingCache | None = None,
    backend: BackendConfig | None = None,
) -> PublishResult:
    """Encode `data_dir`'s corpus with the model, evaluate on `split`, build and publish a bundle.

    `model_dir` is a training run folder (`<out>` with model/, config.json, metrics.json, report/), its
    model/ folder, or any sentence-transformers folder; None means the packaged base model.

    `onnx`: also export the ONNX query encoders (fp32 + int8) into the bundle and record their nDCG@10
    against torch, so the API picks the fast one only when it costs no quality.
    `distill`: also train the distilled query encoders on `distill_split` (training.distill_step) and
    record their quality on `split`.
    `evaluation`: an `evaluate()` of this very model over this corpus (the trainer's final one); its corpus
    embeddings are reused instead of encoding the corpus a second time.
    `checkpoint`: called between phases and every 1,024 documents encoded; it cancels the indexing by
    raising (a job's cancel). Nothing is published then, and the build folder is removed.
    `timer`: records the wall time of each phase (encode, index build, ONNX export, publish).
    `cache`: on-disk corpus embeddings (training.embedding_cache), used when `evaluation` does not match.
    `backend`: where the index goes (default FAISS in the bundle; milvus: a collection per version,
    training.milvus_publish, with the live alias flipped when the version becomes CURRENT).
    """
    stop = checkpoint or (lambda: None)
    if index_kind not in KINDS:
        raise ConfigError(f"--index: unknown index kind {index_kind!r} (expected one of {', '.join(KINDS)})")
    if not 0.0 < target_recall <= 1.0:
        raise ConfigError(f"--target-recall must be in (0, 1], got {target_recall}")
    milvus = backend is not None and backend.backend == "milvus"
    if milvus and distill is not None:
        raise ConfigError(
            "--distill is not supported with the milvus index backend yet (it reads FAISS vectors)"
        )
    model_path, run = (None, None) if model_dir is None else resolve_run(model_dir)
    with phase(timer, "load data + model"):
        encoder = Encoder.load(model_path)
        data = load_split(data_dir, split)
    training_config: dict[str, Any] = {}
    extras: dict[str, Any] = {
        "data": str(data_dir),
        "split": split,
        FINGERPRINT_KEY: evaluation_fingerprint(data),
    }
    report_dir = None
    if run is not None:
        if (run / RUN_CONFIG).is_file():
            training_config = _read_json(run / RUN_CONFIG)
        if (run / RUN_METRICS).is_file():
            extras["training_metrics"] = _read_json(run / RUN_METRICS)
        if (run / RUN_REPORT / "report.json").is_file():
            report_dir = run / RUN_REPORT
        if (run / MANIFEST_FILE).is_file():  # re-indexing with a published bundle's model: keep its story
            previous = read_manifest(run)
            training_config = previous.training_config.model_dump(mode="json")
            extras = {**{k: v for k, v in previous.extras.items() if k == "training_metrics"}, **extras}
            extras["reindexed_from"] = previous.version

    stop()
    with phase(timer, "encode + evaluate (index)"):
        query_emb = encoder.encode(list(data.queries.values()), kind="query")  # (n_queries, dim)
        if evaluation is not None and evaluation.doc_ids == list(data.corpus):
            logger.info("reusing the training run's corpus embeddings (%d documents)", len(data.corpus))
            doc_emb = evaluation.doc_embeddings  # (n_docs, dim)
        else:
            logger.info("encoding %d documents with %s", len(data.corpus), encoder.source)
            _, doc_emb = encode_corpus(
                encoder, data.corpus, show_progress=show_progress, checkpoint=stop, cache=cache
            )  # (n_docs, dim)
        # metrics on every query of the split (the trainer may have evaluated a subsample): cheap given doc_emb
        result = evaluate(
            encoder, data, doc_embeddings=doc_emb, query_embeddings=query_emb, show_progress=show_progress
        )
    # stored as "test" whatever the split is called: the gate compares held-out metrics under that key
    metrics = {"test": result.metrics}

    pointer = MilvusPointer(backend) if milvus and backend is not None else None
    store = BundleStore(bundles_dir, keep=keep, pointer=pointer)
    # built beside the versions so publishing is a rename; a crash leaves a folder the next publish removes
    with store.build_dir() as staging, _unpublished_collection_dropped(backend if milvus else None, staging):
        stop()
        with phase(timer, "index + bundle"):
            # documents upserted / deleted through the API since: served by this bundle, replayed after it
            folded = fold_log(store.root, data.corpus, doc_emb, encoder, show_progress=show_progress)
            extras[SEQ_KEY] = folded.seq
            builder = (
                milvus_builder(
                    backend,
                    folded.corpus,
                    metric=encoder.index_metric,
                    index_kind=index_kind,
                    target_recall=target_recall,
                )
                if milvus and backend is not None
                else None
            )
            build_bundle(
                encoder,
                folded.corpus,
                staging_dir=staging,
                doc_embeddings=folded.embeddings,
                index_kind=index_kind,
                tune_queries=query_emb,
                target_recall=target_recall,
                memory_budget_bytes=memory_budget_bytes,
                training_config=training_config,
                metrics=metrics,
                report_dir=report_dir,
                base_model=_base_model_name(training_config),
                extras=extras,
                show_progress=show_progress,
                index_builder=builder,
            )
        stop()
        with phase(timer, "lexical index + fusion tuning"):
            attach_lexical(
                staging,
                encoder,
                data,
                doc_emb,
                query_emb,
                validation_split(data_dir, training_config),
                bundle_corpus=folded.corpus,
            )
        if onnx:
            stop()
            # after the model is staged, before publishing: attach_onnx refreshes the manifest checksums
            with phase(timer, "ONNX export + check"):
                attach_onnx(
                    staging,
                    data.queries,
                    data.qrels,
                    quantize=True,
                    index_opener=pointer.open_index if pointer is not None else None,
                )
        if distill is not None:
            from training.distill_step import attach_query_encoders  # torch: only when asked

            stop()
            train = load_split(data_dir, distill_split)
            with phase(timer, "distill query encoders"):
                attach_query_encoders(
                    staging, train, data.queries, data.qrels, config=distill, doc_embeddings=folded.embeddings
                )
        stop()  # the last moment a cancel is honoured: publishing is not interrupted
        with phase(timer, "publish"):
            return store.publish(staging, gate_metric=gate_metric, tolerance=tolerance, force=force)


@contextmanager
def _unpublished_collection_dropped(backend: BackendConfig | None, staging: Path) -> Iterator[None]:
    """A failed or cancelled Milvus build drops the collection it created, unless the version got published
    (the rename happened: the version folder owns its collection, keep-N drops it later)."""
    try:
        yield
    except BaseException:
        manifest_path = staging / MANIFEST_FILE
        if backend is not None and manifest_path.is_file():
            collection = read_manifest(staging).extras.get(MILVUS_EXTRAS, {}).get("collection")
            if collection:
                drop_collection(backend, collection)
        raise
