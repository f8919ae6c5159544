"""`python -m training index`: encode a corpus with a trained model, build the bundle, publish it.

The test metrics that drive the quality gate are measured with exact search (training.eval.evaluate), so the
gate judges the model, not the ANN approximation; the index's own recall@10 against exact search is
measured on the real test queries and recorded in the manifest.

index_model's options:
- `model_dir`: a training run folder (`<out>` with model/, config.json, metrics.json, report/), its model/
  folder, or any sentence-transformers folder; None means the packaged base model.
- `onnx`: also export the ONNX query encoders (fp32 + int8) into the bundle and record their nDCG@10
  against torch, so the API picks the fast one only when it costs no quality.
- `distill`: also train the distilled query encoders on `distill_split` (training.distill.bundle_step) and
  record their quality on `split`. `distill_optional` (the default static tower, not asked for): skipped,
  with a log line, where it cannot run (no `distill_split` in the data, a Milvus index) instead of failing.
- `evaluation`: an `evaluate()` of this very model over this corpus (the trainer's final one); its corpus
  embeddings are reused instead of encoding the corpus a second time.
- `checkpoint`: called between phases and every 1,024 documents encoded; it cancels the indexing by
  raising (a job's cancel). Nothing is published then, and the build folders are removed.
- `timer`: records the wall time of each phase (encode, index build, ONNX export, publish).
- `cache`: on-disk corpus embeddings (training.eval.embedding_cache), used when `evaluation` does not match.
- `backend`: where the index goes (default FAISS in the bundle; milvus: a collection per version,
  training.export.milvus_build, with the live alias flipped when the version becomes CURRENT).

The offline path streams (training.export.shards): the corpus is encoded 1,024 documents at a time into a
memory-mapped shard in a scratch build folder, the mutation log is folded into another, and the index
(FAISS or Milvus) is filled from the memory map chunk by chunk, so the corpus embeddings are never held
in RAM twice (a FAISS index is itself one copy of the vectors; Milvus holds them in its server).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from contract.defaults import GATE_METRIC, GATE_TOLERANCE, KEEP_VERSIONS, TARGET_RECALL
from contract.encoding.encoder import Encoder
from contract.errors import ConfigError, DataError, ModelLoadError
from contract.index.backend import BackendConfig
from contract.milvus.pointer import MilvusPointer
from contract.mutations.log import SEQ_KEY
from training.bundle.build import build_bundle
from training.bundle.store import BundleStore, PublishResult
from training.data.split import load_split
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import EvalResult, evaluate
from training.export.index_factory import KINDS
from training.export.milvus_build import milvus_builder
from training.export.onnx_export import attach_onnx
from training.export.shards import encode_corpus_to_disk
from training.hybrid.lexical_step import attach_lexical, validation_split
from training.publish.milvus_housekeeping import (
    reconcile_live_alias,
    sweep_orphan_collections,
    unpublished_collection_dropped,
)
from training.publish.mutation_fold import Folded, fold_log
from training.publish.provenance import RunStory, base_model_name, resolve_run, run_story
from training.train.phase_timer import PhaseTimer, phase

if TYPE_CHECKING:
    from training.data.retrieval_data import RetrievalData
    from training.distill.config import DistillConfig

logger = logging.getLogger(__name__)


def index_model(
    model_dir: str | Path | None,
    data_dir: str | Path,
    bundles_dir: str | Path,
    *,
    index_kind: str = "auto",
    target_recall: float = TARGET_RECALL,
    split: str = "test",
    force: bool = False,
    keep: int = KEEP_VERSIONS,
    gate_metric: str = GATE_METRIC,
    tolerance: float = GATE_TOLERANCE,
    memory_budget_bytes: int | None = None,
    onnx: bool = True,
    distill: DistillConfig | None = None,
    distill_split: str = "train",
    distill_optional: bool = False,
    evaluation: EvalResult | None = None,
    show_progress: bool = True,
    checkpoint: Callable[[], None] | None = None,
    timer: PhaseTimer | None = None,
    cache: EmbeddingCache | None = None,
    backend: BackendConfig | None = None,
) -> PublishResult:
    """Encode `data_dir`'s corpus with the model, evaluate on `split`, build and publish a bundle.

    The module docstring says what each option does. The corpus embeddings are encoded to a memory-mapped
    shard in a scratch build folder (or come memory-mapped from `cache`, or from `evaluation`), so no step
    holds them in RAM twice; the scratch folder goes when the build ends, published or not.
    """
    if distill is not None and distill_optional and backend is not None and backend.backend == "milvus":
        logger.info("no static query tower: the milvus index backend does not support distillation yet")
        distill = None
    _check_options(index_kind, target_recall, backend, distill)
    stop = checkpoint or (lambda: None)
    model_path, run_dir = (None, None) if model_dir is None else resolve_run(model_dir)
    if model_path is not None and not model_path.is_dir():
        raise ModelLoadError(f"{model_path}: no such model folder (give a training run folder or its model/)")
    with phase(timer, "load data + model"):
        # the data first: a missing folder or a broken line is reported in a moment, not after the model load
        data = load_split(data_dir, split)
        encoder = Encoder.load(model_path)
    story = run_story(run_dir, data_dir, split, data)
    pointer = MilvusPointer(backend) if backend is not None and backend.backend == "milvus" else None
    store = BundleStore(bundles_dir, keep=keep, pointer=pointer)
    # both beside the versions (publishing is a rename); a crash leaves folders the next publish removes
    with (
        store.build_dir() as scratch,
        store.build_dir() as staging,
        unpublished_collection_dropped(backend if pointer is not None else None, staging),
    ):
        stop()
        with phase(timer, "encode + evaluate (index)"):
            emb = _encode_and_evaluate(encoder, data, scratch, evaluation, cache, stop, show_progress)
        stop()
        with phase(timer, "index + bundle"):
            options = _IndexOptions(index_kind, target_recall, memory_budget_bytes, backend, show_progress)
            folded = _build_staged(staging, scratch, store.root, encoder, data, emb, story, options)
        steps = _Attach(data_dir, story, onnx, distill, distill_split, pointer, timer, stop, distill_optional)
        steps.run(staging, encoder, data, emb, folded)
        stop()  # the last moment a cancel is honoured: publishing is not interrupted
        with phase(timer, "publish"):
            gate = (gate_metric, tolerance, force)
            return _publish(store, staging, pointer, (scratch, staging), gate)


def _check_options(
    index_kind: str, target_recall: float, backend: BackendConfig | None, distill: DistillConfig | None
) -> None:
    if index_kind not in KINDS:
        raise ConfigError(f"--index: unknown index kind {index_kind!r} (expected one of {', '.join(KINDS)})")
    if not 0.0 < target_recall <= 1.0:
        raise ConfigError(f"--target-recall must be in (0, 1], got {target_recall}")
    if backend is not None and backend.backend == "milvus" and distill is not None:
        raise ConfigError(
            "--distill is not supported with the milvus index backend yet (it reads FAISS vectors)"
        )


@dataclass
class _Embedded:
    """The split encoded, and its exact-search metrics (the ones the gate judges)."""

    queries: np.ndarray  # (n_queries, dim)
    docs: np.ndarray  # (n_docs, dim) in corpus order: memory-mapped unless the trainer's evaluation's
    metrics: dict[str, dict[str, float]]


def _encode_and_evaluate(
    encoder: Encoder,
    data: RetrievalData,
    scratch: Path,
    evaluation: EvalResult | None,
    cache: EmbeddingCache | None,
    stop: Callable[[], None],
    show_progress: bool,
) -> _Embedded:
    query_emb = encoder.encode(list(data.queries.values()), kind="query")  # (n_queries, dim)
    if evaluation is not None and evaluation.doc_ids == list(data.corpus):
        logger.info("reusing the training run's corpus embeddings (%d documents)", len(data.corpus))
        doc_emb = evaluation.doc_embeddings  # (n_docs, dim)
    else:
        logger.info("encoding %d documents with %s", len(data.corpus), encoder.source)
        doc_emb = encode_corpus_to_disk(
            encoder,
            data.corpus,
            scratch / "corpus",
            cache=cache,
            show_progress=show_progress,
            checkpoint=stop,
        )  # (n_docs, dim) memmap
    # metrics on every query of the split (the trainer may have evaluated a subsample): cheap given doc_emb
    result = evaluate(
        encoder, data, doc_embeddings=doc_emb, query_embeddings=query_emb, show_progress=show_progress
    )
    # stored as "test" whatever the split is called: the gate compares held-out metrics under that key
    return _Embedded(query_emb, doc_emb, {"test": result.metrics})


@dataclass(frozen=True)
class _IndexOptions:
    kind: str
    target_recall: float
    memory_budget_bytes: int | None
    backend: BackendConfig | None
    show_progress: bool


def _build_staged(
    staging: Path,
    scratch: Path,
    store_root: Path,
    encoder: Encoder,
    data: RetrievalData,
    emb: _Embedded,
    story: RunStory,
    options: _IndexOptions,
) -> Folded:
    """Stage the bundle (index, model, documents, manifest); returns the corpus it serves."""
    # documents upserted / deleted through the API since: served by this bundle, replayed after it
    folded = fold_log(
        store_root,
        data.corpus,
        emb.docs,
        encoder,
        show_progress=options.show_progress,
        out_dir=scratch / "folded",
    )
    story.extras[SEQ_KEY] = folded.seq
    backend = options.backend
    builder = None
    if backend is not None and backend.backend == "milvus":
        builder = milvus_builder(
            backend,
            folded.corpus,
            metric=encoder.index_metric,
            index_kind=options.kind,
            target_recall=options.target_recall,
        )
    build_bundle(
        encoder,
        folded.corpus,
        staging_dir=staging,
        doc_embeddings=folded.embeddings,
        index_kind=options.kind,
        tune_queries=emb.queries,
        target_recall=options.target_recall,
        memory_budget_bytes=options.memory_budget_bytes,
        training_config=story.training_config,
        metrics=emb.metrics,
        report_dir=story.report_dir,
        base_model=base_model_name(story.training_config),
        extras=story.extras,
        show_progress=options.show_progress,
        index_builder=builder,
        scratch_dir=scratch,
    )
    return folded


@dataclass(frozen=True)
class _Attach:
    """The steps after the bundle is staged: lexical index + fusion tuning, ONNX, distilled encoders."""

    data_dir: str | Path
    story: RunStory
    onnx: bool
    distill: DistillConfig | None
    distill_split: str
    pointer: MilvusPointer | None
    timer: PhaseTimer | None
    stop: Callable[[], None]
    distill_optional: bool = False

    def run(
        self, staging: Path, encoder: Encoder, data: RetrievalData, emb: _Embedded, folded: Folded
    ) -> None:
        self.stop()
        with phase(self.timer, "lexical index + fusion tuning"):
            validation = validation_split(self.data_dir, self.story.training_config)
            attach_lexical(
                staging, encoder, data, emb.docs, emb.queries, validation, bundle_corpus=folded.corpus
            )
        if self.onnx:
            self.stop()
            # after the model is staged, before publishing: attach_onnx refreshes the manifest checksums
            with phase(self.timer, "ONNX export + check"):
                opener = self.pointer.open_index if self.pointer is not None else None
                attach_onnx(staging, data.queries, data.qrels, quantize=True, index_opener=opener)
        if self.distill is not None:
            from training.distill.bundle_step import attach_query_encoders  # torch: only when asked

            self.stop()
            try:
                train = load_split(self.data_dir, self.distill_split)
            except DataError as exc:
                if not self.distill_optional:
                    raise
                logger.warning("no static query tower: %s", exc)
                return
            with phase(self.timer, "distill query encoders"):
                attach_query_encoders(
                    staging,
                    train,
                    data.queries,
                    data.qrels,
                    config=self.distill,
                    doc_embeddings=folded.embeddings,
                )


def _publish(
    store: BundleStore,
    staging: Path,
    pointer: MilvusPointer | None,
    own_builds: tuple[Path, ...],
    gate: tuple[str, float, bool],
) -> PublishResult:
    """store.publish with the gate's (metric, tolerance, force), and with Milvus its housekeeping: the
    live alias is re-pointed at CURRENT's collection first if a publisher died before flipping it, and
    collections of killed builds are swept after (`own_builds`: this build's folders)."""
    gate_metric, tolerance, force = gate
    if pointer is not None:
        reconcile_live_alias(store, pointer)
    result = store.publish(staging, gate_metric=gate_metric, tolerance=tolerance, force=force)
    if pointer is not None:
        sweep_orphan_collections(store, pointer, own_builds)
    return result
