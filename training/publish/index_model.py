"""`python -m training index`: encode a corpus with a trained model, build the bundle, publish it.

The test metrics that drive the quality gate are measured with exact search (training.eval.evaluate), so the
gate judges the model, not the ANN approximation; the index's own recall@10 against exact search is
measured on the real test queries and recorded in the manifest.

index_model(model_dir, plan, hooks): the plan (contract/jobs/plan.py, a PublishPlan or a RetrainPlan)
says what is built, the hooks (training/train/run_hooks.py) how this process watches it.
- `model_dir`: a training run folder (`<out>` with model/, config.json, metrics.json, report/), its model/
  folder, or any sentence-transformers folder; None means the packaged base model.
- `plan.publication.onnx`: also export the ONNX query encoders (fp32 + int8) into the bundle and record
  their nDCG@10 against torch, so the API picks the fast one only when it costs no quality.
- `plan.publication.distill`: also train the distilled query encoders on the plan's train split
  (training.distill.bundle_step) and record their quality on its eval split. None (the default static
  tower, not asked for): skipped, with a log line, where it cannot run (no train split in the data, a
  Milvus index) instead of failing.
- `evaluation`: an `evaluate()` of this very model over this corpus (the trainer's final one); its corpus
  embeddings are reused instead of encoding the corpus a second time.
- `hooks.checkpoint`: called between phases and every 1,024 documents encoded; it cancels the indexing by
  raising (a job's cancel). Nothing is published then, and the build folders are removed.
- `hooks.timer`: records the wall time of each phase (encode, index build, ONNX export, publish).
- `hooks.cache`: on-disk corpus embeddings (training.eval.embedding_cache), used when `evaluation` does
  not match.
- `plan.index.backend`: where the index goes (default FAISS in the bundle; milvus: a collection per
  version, training.export.milvus_build, with the live alias flipped when the version becomes CURRENT).

The offline path streams (training.export.shards): the corpus is encoded 1,024 documents at a time into a
memory-mapped shard in a scratch build folder, the mutation log is folded into another, and the index
(FAISS or Milvus) is filled from the memory map chunk by chunk, so the corpus embeddings are never held
in RAM twice (a FAISS index is itself one copy of the vectors; Milvus holds them in its server).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.encoding.encoder import Encoder
from contract.errors import ConfigError, DataError, ModelLoadError
from contract.jobs.plan import PLAN_KEY, IndexPlan, PublicationPlan, PublishPlan
from contract.milvus.pointer import MilvusPointer
from contract.mutations.log import SEQ_KEY
from training.bundle.build import BuildOptions, BundleRecord, build_bundle
from training.bundle.store import BundleStore, PublishResult
from training.data.split import load_split
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
from training.train.phase_timer import phase
from training.train.run_hooks import RunHooks

if TYPE_CHECKING:
    from training.data.retrieval_data import RetrievalData
    from training.distill.config import DistillConfig

logger = logging.getLogger(__name__)


def index_model(
    model_dir: str | Path | None,
    plan: PublishPlan,
    hooks: RunHooks | None = None,
    *,
    evaluation: EvalResult | None = None,
    metrics: dict[str, dict[str, float]] | None = None,
    extras: dict[str, Any] | None = None,
) -> PublishResult:
    """Encode the plan's corpus with the model, evaluate on its eval split, build and publish a bundle.

    The module docstring says what each option does. The corpus embeddings are encoded to a memory-mapped
    shard in a scratch build folder (or come memory-mapped from `hooks.cache`, or from `evaluation`), so
    no step holds them in RAM twice; the scratch folder goes when the build ends, published or not.
    `metrics` and `extras` join the manifest's (a retrain's held-out feedback slice: the gate reads it).
    """
    hooks = hooks or RunHooks()
    distill = _distill(plan)
    _check_options(plan.index, distill)
    model_path, run_dir = (None, None) if model_dir is None else resolve_run(model_dir)
    if model_path is not None and not model_path.is_dir():
        raise ModelLoadError(f"{model_path}: no such model folder (give a training run folder or its model/)")
    with phase(hooks.timer, "load data + model"):
        # the data first: a missing folder or a broken line is reported in a moment, not after the model load
        data = hooks.split(plan.data.data_dir, plan.data.eval_split)
        encoder = Encoder.load(model_path)
    story = run_story(run_dir, plan.data.data_dir, plan.data.eval_split, data)
    story.extras[PLAN_KEY] = plan.record()  # the plan, recorded once: in the manifest it builds
    story.extras.update(extras or {})
    backend = plan.index.backend
    pointer = MilvusPointer(backend) if backend is not None and plan.index.milvus else None
    store = BundleStore(plan.publication.bundles_dir, keep=plan.publication.keep, pointer=pointer)
    # both beside the versions (publishing is a rename); a crash leaves folders the next publish removes
    with (
        store.build_dir() as scratch,
        store.build_dir() as staging,
        unpublished_collection_dropped(backend if pointer is not None else None, staging),
    ):
        hooks.stop()
        with phase(hooks.timer, "encode + evaluate (index)"):
            emb = _encode_and_evaluate(encoder, data, scratch, evaluation, hooks)
            emb.metrics.update(metrics or {})
        hooks.stop()
        with phase(hooks.timer, "index + bundle"):
            where = _Staging(staging, scratch, store.root)
            folded = _build_staged(where, encoder, data, emb, story, plan, hooks)
        _Attach(plan, story, distill, pointer, hooks).run(staging, encoder, data, emb, folded)
        hooks.stop()  # the last moment a cancel is honoured: publishing is not interrupted
        with phase(hooks.timer, "publish"):
            return _publish(store, staging, pointer, (scratch, staging), plan.publication)


def _distill(plan: PublishPlan) -> DistillConfig | None:
    """The plan's distillation; the default one (not asked for) is skipped with a Milvus index."""
    from training.distill.config import publication_distill

    distill = publication_distill(plan.publication)
    if distill is not None and plan.publication.distill is None and plan.index.milvus:
        logger.info("no static query tower: the milvus index backend does not support distillation yet")
        return None
    return distill


def _check_options(index: IndexPlan, distill: DistillConfig | None) -> None:
    if index.kind not in KINDS:
        raise ConfigError(f"--index: unknown index kind {index.kind!r} (expected one of {', '.join(KINDS)})")
    if index.milvus and distill is not None:
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
    hooks: RunHooks,
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
            cache=hooks.cache,
            show_progress=hooks.show_progress,
            checkpoint=hooks.stop,
        )  # (n_docs, dim) memmap
    # metrics on every query of the split (the trainer may have evaluated a subsample): cheap given doc_emb
    result = evaluate(
        encoder, data, doc_embeddings=doc_emb, query_embeddings=query_emb, show_progress=hooks.show_progress
    )
    # stored as "test" whatever the split is called: the gate compares held-out metrics under that key
    return _Embedded(query_emb, doc_emb, {"test": result.metrics})


@dataclass(frozen=True)
class _Staging:
    """The build's folders: the bundle staged, scratch memory maps, the store's root (its mutation log)."""

    staging: Path
    scratch: Path
    store_root: Path


def _build_staged(
    where: _Staging,
    encoder: Encoder,
    data: RetrievalData,
    emb: _Embedded,
    story: RunStory,
    plan: PublishPlan,
    hooks: RunHooks,
) -> Folded:
    """Stage the bundle (index, model, documents, manifest); returns the corpus it serves."""
    # documents upserted / deleted through the API since: served by this bundle, replayed after it
    folded = fold_log(
        where.store_root,
        data.corpus,
        emb.docs,
        encoder,
        show_progress=hooks.show_progress,
        out_dir=where.scratch / "folded",
    )
    story.extras[SEQ_KEY] = folded.seq
    backend = plan.index.backend
    builder = None
    if backend is not None and plan.index.milvus:
        builder = milvus_builder(
            backend,
            folded.corpus,
            metric=encoder.index_metric,
            index_kind=plan.index.kind,
            target_recall=plan.index.target_recall,
        )
    record = BundleRecord(
        training_config=story.training_config,
        metrics=emb.metrics,
        report_dir=story.report_dir,
        base_model=base_model_name(story.training_config),
        extras=story.extras,
    )
    build = BuildOptions(
        index=plan.index,
        tune_queries=emb.queries,
        show_progress=hooks.show_progress,
        index_builder=builder,
        scratch_dir=where.scratch,
    )
    build_bundle(encoder, folded.corpus, where.staging, folded.embeddings, record=record, build=build)
    return folded


@dataclass(frozen=True)
class _Attach:
    """The steps after the bundle is staged: lexical index + fusion tuning, ONNX, distilled encoders."""

    plan: PublishPlan
    story: RunStory
    distill: DistillConfig | None
    pointer: MilvusPointer | None
    hooks: RunHooks

    def run(
        self, staging: Path, encoder: Encoder, data: RetrievalData, emb: _Embedded, folded: Folded
    ) -> None:
        timer, data_dir = self.hooks.timer, self.plan.data.data_dir
        self.hooks.stop()
        with phase(timer, "lexical index + fusion tuning"):
            validation = validation_split(data_dir, self.story.training_config)
            attach_lexical(
                staging, encoder, data, emb.docs, emb.queries, validation, bundle_corpus=folded.corpus
            )
        if self.plan.publication.onnx:
            self.hooks.stop()
            # after the model is staged, before publishing: attach_onnx refreshes the manifest checksums
            with phase(timer, "ONNX export + check"):
                opener = self.pointer.open_index if self.pointer is not None else None
                attach_onnx(staging, data.queries, data.qrels, quantize=True, index_opener=opener)
        if self.distill is not None:
            self._distill(staging, data, folded, self.distill)

    def _distill(self, staging: Path, data: RetrievalData, folded: Folded, distill: DistillConfig) -> None:
        from training.distill.bundle_step import attach_query_encoders  # torch: only when asked

        self.hooks.stop()
        try:
            train = load_split(self.plan.data.data_dir, self.plan.data.train_split)
        except DataError as exc:
            if self.plan.publication.distill is not None:  # asked for: its absence is an error
                raise
            logger.warning("no static query tower: %s", exc)
            return
        with phase(self.hooks.timer, "distill query encoders"):
            attach_query_encoders(
                staging, train, data.queries, data.qrels, config=distill, doc_embeddings=folded.embeddings
            )


def _publish(
    store: BundleStore,
    staging: Path,
    pointer: MilvusPointer | None,
    own_builds: tuple[Path, ...],
    publication: PublicationPlan,
) -> PublishResult:
    """store.publish through the plan's publication gate, and with Milvus its housekeeping: the
    live alias is re-pointed at CURRENT's collection first if a publisher died before flipping it, and
    collections of killed builds are swept after (`own_builds`: this build's folders)."""
    if pointer is not None:
        reconcile_live_alias(store, pointer)
    result = store.publish(staging, gate=publication)
    if pointer is not None:
        sweep_orphan_collections(store, pointer, own_builds)
    return result
