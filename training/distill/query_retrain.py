"""Query-side retrain: a new version whose cost does not grow with the corpus.

The live bundle's document vectors and index stay as they are; only a query tower is fine-tuned
(training/distill/query_tower.py: LoRA adapters, all weights, or a truncated copy of the live query
encoder) with the project's InfoNCE against those fixed vectors (training/distill/query_loop.py):
in-batch negatives plus negatives mined *from the live index* (search results with the live query
encoder, their vectors read back from the index: no document is encoded). Training text: the train
split's queries (the validation carve held out, training/data/validation_carve.py) and, when asked, the
title / sentence pseudo-queries `distill` makes (training/distill/pairs.py).

The new version (training/distill/query_bundle.py) shares `index.faiss`, `ids.json`, `docs.sqlite`,
`lexical/` and the parent's document tower with its parent through hard links; its `model/` is a
two-tower folder (the tuned query tower, `model/document/` the parent's document encoder), so upserts
through the API keep encoding documents the way the index was built. It gets its own metrics (test
queries through the shared index, every search mode, fusion tuned again on validation), its own gap
report (the tuned query tower against the fixed document vectors, labelled so in `report.towers`), ONNX
export and, by default, a static query tower; then the same quality gate as every publish.

What grows with the corpus here: one index search per training and test query, reading back the vectors
of the documents that training touches, hashing the shared files for the manifest, and the gap report's
pool (capped at `query_report_pool` documents).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contract.atomic import write_json_atomic, write_text_atomic
from contract.bundles.bundle import (
    MANIFEST_FILE,
    MODEL_DIR,
    Bundle,
    checksums,
    load_bundle,
    new_version_id,
    read_manifest,
)
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.encoding.similarity import SIMILARITY_FILE
from contract.errors import ConfigError
from contract.index.backend import is_milvus
from training.bundle.portable_paths import portable, relocate_report
from training.bundle.store import FINGERPRINT_KEY, BundleStore, PublishResult, evaluation_fingerprint
from training.data.retrieval_data import RetrievalData
from training.data.split import load_split
from training.data.validation_carve import carve_validation
from training.distill.config import DistillConfig
from training.distill.pairs import DistillPairs, distill_pairs
from training.distill.query_bundle import dense_runs, link_shared, retune_modes
from training.distill.query_config import QueryRetrainConfig
from training.distill.query_loop import FixedDocs, LoopResult, fit_query_tower
from training.distill.query_tower import fixed_vectors, merged, query_tower
from training.eval.search_metrics import search_metrics
from training.train.phase_timer import PhaseTimer, phase
from training.train.phases import LiveReference
from training.train.step import ProgressFn

logger = logging.getLogger(__name__)

EXTRAS_KEY = "query_retrain"  # manifest.extras: the parent, the tower, its training and what is shared
TOWERS_NOTE = (
    "risks of the tuned query tower against the fixed document embeddings of the parent bundle (the "
    "documents were not encoded again: a query-side retrain)"
)
# extras of the parent that describe its own build, not this version's
PARENT_ONLY_EXTRAS = ("onnx", "query_encoders", "training_metrics", "distilled_from", "reindexed_from")


@dataclass
class QueryRetrainResult:
    publish: PublishResult | None  # None: not published (`train --tower query`)
    parent: str
    base_metrics: dict[str, float]  # the live query encoder on the test split, through the shared index
    tuned_metrics: dict[str, float]  # the tuned query tower, the same way
    loop: LoopResult
    shared: dict[str, str]  # child path -> linked | copied
    run_dir: Path
    seconds: float


def query_side_blocker(
    store: BundleStore, data_dir: str | Path, eval_split: str, *, data: RetrievalData | None = None
) -> str | None:
    """Why a query-side retrain cannot run on this folder and dataset (None: it can). `auto` falls back to
    a full retrain on any reason: nothing live, an index outside the bundle (Milvus), a model that is not
    cosine InfoNCE, or documents that are not the live bundle's."""
    live = store.current_version()
    if live is None:
        return "nothing is live yet (a query-side retrain keeps the live bundle's documents)"
    manifest = read_manifest(store.version_path(live))
    if is_milvus(manifest.index):
        return f"live bundle {live} keeps its vectors in Milvus (query-side retrain needs its FAISS index)"
    if manifest.metric.similarity != "cosine":
        return f"live bundle {live} is an AnInfoNCE model (query-side retrain supports cosine InfoNCE)"
    data = data if data is not None else load_split(data_dir, eval_split)
    if manifest.extras.get(FINGERPRINT_KEY) == evaluation_fingerprint(data):
        return None  # the same documents, queries and judgements as the live bundle was built from
    return _documents_differ(store.version_path(live), data)


def live_reference(store: BundleStore, data_dir: str | Path, eval_split: str) -> LiveReference | None:
    """The live bundle's query encoder and document vectors (read back from its index), for a full retrain
    to evaluate "before" and mine negatives with instead of encoding the corpus with the base model; None
    when no live bundle holds this dataset's documents (query_side_blocker's conditions)."""
    reason = query_side_blocker(store, data_dir, eval_split)
    if reason is not None:
        logger.info("no live bundle's vectors to start from (%s): the base model encodes the corpus", reason)
        return None
    version = str(store.current_version())
    bundle = load_bundle(store.version_path(version), verify=False, mmap=True)
    try:
        vectors = fixed_vectors(bundle.index, range(bundle.index.ntotal))  # (n, D)
    finally:
        bundle.docstore.close()
    logger.info(
        "full retrain starts from live bundle %s's %d document vectors (no base encode)",
        version,
        len(vectors),
    )
    return LiveReference(bundle.encoder, list(bundle.doc_ids), vectors, version)


def _documents_differ(folder: Path, data: RetrievalData) -> str | None:
    """None when the bundle's documents are the dataset's corpus (ids, order, titles, texts)."""
    from contract.index.docstore import DocStore

    ids = json.loads((folder / "ids.json").read_text(encoding="utf-8"))
    if ids != list(data.corpus):
        return f"the dataset's documents are not those of live bundle {folder.name} (ids differ)"
    store = DocStore(folder / "docs.sqlite")
    try:
        for start in range(0, len(ids), 4096):
            rows = store.get(range(start, min(start + 4096, len(ids))), ("title", "text"))
            for doc_id, row in zip(ids[start : start + 4096], rows, strict=True):
                doc = data.corpus[doc_id]
                if (row.get("title") or "") != (doc.title or "") or (row.get("text") or "") != doc.text:
                    return f"document {doc_id} changed since live bundle {folder.name} was built"
    finally:
        store.close()
    return None


def query_side_retrain(
    data_dir: str | Path,
    bundles_dir: str | Path,
    *,
    train_config: TrainConfig,
    config: QueryRetrainConfig,
    run_dir: str | Path,
    onnx: bool = True,
    distill: DistillConfig | None = None,
    force: bool = False,
    keep: int = 5,
    gate_metric: str = "ndcg@10",
    tolerance: float = 0.005,
    on_progress: ProgressFn | None = None,
    checkpoint: Callable[[], None] | None = None,
    timer: PhaseTimer | None = None,
    publish: bool = True,
) -> QueryRetrainResult:
    """Train a query tower against the live bundle of `bundles_dir` and publish it as a new version
    sharing the live index (see the module docstring). `train_config` gives the splits, the validation
    carve, the seed, `max_steps` and `eval_max_queries` (the report's queries). `publish=False` (`train
    --tower query`): the two-tower model and its report go into `run_dir` instead; nothing is published."""
    started = time.perf_counter()
    stop = checkpoint or (lambda: None)
    store = BundleStore(bundles_dir, keep=keep)
    with phase(timer, "load data + live bundle"):
        fit, val, test = _splits(data_dir, train_config)
        blocker = query_side_blocker(store, data_dir, train_config.eval_split, data=test)
        if blocker is not None:
            raise ConfigError(f"--tower query: {blocker}")
        parent = str(store.current_version())
        parent_dir = store.version_path(parent)
        live = load_bundle(parent_dir, verify=False, mmap=True)  # publishing verifies every checksum
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with store.build_dir() as staging:
            with phase(timer, "query pairs + mine negatives (live index)"):
                pairs, negatives, docs = _training_inputs(live, fit, config, train_config.seed)
            stop()
            tower = query_tower(parent_dir / MODEL_DIR, config)
            validate = _validator(live, tower.model, val)
            loop = fit_query_tower(
                tower.model, tower.params, pairs, docs, negatives,
                temperature=live.encoder.similarity.logit_divisor(), config=config, seed=train_config.seed,
                max_steps=train_config.max_steps, validate=validate, on_progress=on_progress, timer=timer,
            )  # fmt: skip
            stop()
            with phase(timer, "stage version (shared files, metrics, report)"):
                shared = link_shared(parent_dir, staging, live.manifest.files)
                encoder = _save_tower(merged(tower), parent_dir, staging)
                base, tuned, record, by_mode = _score(live, encoder, val, test)
                _write_report(encoder, live, fit, test, loop, config, train_config, staging, parent)
                _write_manifest(
                    staging, live, parent, config, train_config, loop, shared, record, by_mode,
                    evaluation_fingerprint(test),
                )  # fmt: skip
                _write_run(run_dir, train_config, config, data_dir, pairs, base, tuned, loop, parent)
            if not publish:
                shutil.copytree(staging / MODEL_DIR, run_dir / MODEL_DIR, dirs_exist_ok=True)
                if (staging / "report").is_dir():
                    shutil.copytree(staging / "report", run_dir / "report", dirs_exist_ok=True)
                return QueryRetrainResult(
                    None, parent, base, tuned, loop, shared, run_dir, time.perf_counter() - started
                )
            _attach(staging, data_dir, test, train_config, onnx, distill, timer, stop)
            stop()  # the last moment a cancel is honoured
            with phase(timer, "publish"):
                published = store.publish(staging, gate_metric=gate_metric, tolerance=tolerance, force=force)
    finally:
        live.docstore.close()
    return QueryRetrainResult(
        published, parent, base, tuned, loop, shared, run_dir, time.perf_counter() - started
    )


def _splits(data_dir: str | Path, config: TrainConfig) -> tuple[RetrievalData, RetrievalData, RetrievalData]:
    """(pairs to fit, the validation carve, the whole evaluation split)."""
    train = load_split(data_dir, config.train_split, seed=config.seed)
    fit, val = carve_validation(train, config.validation_fraction, config.seed)
    return fit, val, load_split(data_dir, config.eval_split, seed=config.seed)


def _training_inputs(
    live: Bundle, fit: RetrievalData, config: QueryRetrainConfig, seed: int
) -> tuple[DistillPairs, list[list[int]], FixedDocs]:
    """The pairs, their negatives mined from the live index, and the fixed vectors both need."""
    rng = np.random.default_rng(seed)
    pseudo = DistillConfig(
        title_queries=config.query_title_queries,
        sentence_queries=config.query_sentence_queries,
        sentences_per_doc=config.query_sentences_per_doc,
        seed=seed,
    )
    pairs = distill_pairs(fit, live.doc_ids, pseudo, rng)
    if len(pairs.texts) < 2:
        raise ConfigError("a query-side retrain needs at least 2 training pairs whose documents are indexed")
    positive_vecs = fixed_vectors(live.index, pairs.positives)  # (P, D)
    negatives = mine_from_index(live, pairs, positive_vecs, config, rng)
    needed = sorted(set(pairs.positives) | {j for row in negatives for j in row})
    vectors = fixed_vectors(live.index, needed)  # (m, D)
    return pairs, negatives, FixedDocs(torch.from_numpy(vectors), {p: i for i, p in enumerate(needed)})


def mine_from_index(
    live: Bundle,
    pairs: DistillPairs,
    positive_vecs: np.ndarray,
    config: QueryRetrainConfig,
    rng: np.random.Generator,
) -> list[list[int]]:
    """Per pair, up to `query_hard_negatives` documents from the live index's ranking of its query by the
    live query encoder: ranks [rank_min, rank_max), never a known positive, never scoring above the
    positive's score − margin (the rule of training.train.negatives.mine_hard_negatives, through the index)."""
    n = config.query_hard_negatives
    if n == 0:
        return [[] for _ in pairs.texts]
    q = live.encoder.encode(pairs.texts, kind="query", batch_size=64)  # (P, D), the live query tower
    rank_min, rank_max = config.query_hard_negative_rank_min, config.query_hard_negative_rank_max
    rows = live.index.search(live.encoder.to_index_space(q), min(rank_max, live.index.ntotal))
    pos_scores = (q * positive_vecs).sum(1)  # (P,) cosine: the index's inner product
    mined: list[list[int]] = []
    for i, (positions, scores) in enumerate(rows):
        known = pairs.known[pairs.keys[i]]
        keep = [
            int(p)
            for p, s in zip(positions[rank_min:rank_max], scores[rank_min:rank_max], strict=True)
            if int(p) not in known and s < pos_scores[i] - config.query_hard_negative_margin
        ]
        take = min(n, len(keep))
        mined.append([keep[j] for j in rng.choice(len(keep), size=take, replace=False)] if take else [])
    logger.info("mined %d negatives for %d pairs from the live index", sum(map(len, mined)), len(mined))
    return mined


def _validator(live: Bundle, tower: Any, val: RetrievalData) -> Callable[[], float] | None:
    """nDCG@10 of the validation carve through the live index, queries encoded by the tower as it is."""
    qids = [q for q in val.queries if val.qrels.get(q)]
    if not qids:
        return None
    texts = [val.queries[q] for q in qids]

    def score() -> float:
        q = _encode(tower, texts)
        return search_metrics(live.encoder.similarity, q, qids, val.qrels, live.doc_ids, index=live.index)[
            "ndcg@10"
        ]

    return score


def _encode(model: Any, texts: Sequence[str]) -> np.ndarray:
    emb = model.encode(list(texts), batch_size=64, convert_to_numpy=True, normalize_embeddings=True)
    return np.ascontiguousarray(emb, dtype=np.float32)  # (n, D)


def _save_tower(tower: Any, parent_dir: Path, staging: Path) -> Encoder:
    """model/: the tuned query tower, the parent's similarity.json, model/document/ already linked."""
    folder = staging / MODEL_DIR
    tower.save(str(folder), safe_serialization=True)
    write_text_atomic(folder / SIMILARITY_FILE, (parent_dir / MODEL_DIR / SIMILARITY_FILE).read_text())
    encoder = Encoder.load(folder)
    if not encoder.two_towers:
        raise ConfigError(f"{folder}: the parent's document tower did not arrive (model/document/)")
    return encoder


def _score(
    live: Bundle, encoder: Encoder, val: RetrievalData, test: RetrievalData
) -> tuple[dict[str, float], dict[str, float], dict[str, Any], dict[str, dict[str, float]]]:
    """Live vs tuned dense metrics on the test split (through the shared index), and every mode of the tuned
    tower with fusion tuned again on validation: (base, tuned, extras["retrieval"], metrics by mode)."""
    from training.hybrid.fusion_tuning import metrics_of

    depth = 100
    sim = live.encoder.similarity
    t_ids = [q for q in test.queries if test.qrels.get(q)]
    t_texts = [test.queries[q] for q in t_ids]
    before = dense_runs(live.index, sim, t_ids, live.encoder.encode(t_texts, kind="query"), depth)
    after = dense_runs(live.index, sim, t_ids, encoder.encode(t_texts, kind="query"), depth)
    base = metrics_of(before, test.qrels, live.doc_ids)
    validation = None
    v_ids = [q for q in val.queries if val.qrels.get(q)]
    if v_ids:
        v_emb = encoder.encode([val.queries[q] for q in v_ids], kind="query")
        validation = (dense_runs(live.index, sim, v_ids, v_emb, depth), {q: val.queries[q] for q in v_ids},
                      val.qrels)  # fmt: skip
    record, by_mode = retune_modes(
        live.lexical, live.doc_ids, validation, (after, {q: test.queries[q] for q in t_ids}, test.qrels),
        inherited=live.manifest.extras.get("retrieval"),
    )  # fmt: skip
    logger.info(
        "query-side retrain, test nDCG@10 (dense): live %.4f -> tuned %.4f; served mode %s %.4f",
        base["ndcg@10"], by_mode["dense"]["ndcg@10"], record["default_mode"],
        by_mode[record["default_mode"]]["ndcg@10"],
    )  # fmt: skip
    return base, by_mode["dense"], record, by_mode


def _report_pool(
    live: Bundle, fit: RetrievalData, test: RetrievalData, cap: int, seed: int
) -> tuple[list[str], np.ndarray]:
    """The gap report's pool: every judged document of both splits plus a seeded sample of the rest, at most
    `cap` documents (the whole corpus when it is smaller), with their fixed vectors from the index."""
    position = {d: i for i, d in enumerate(live.doc_ids)}
    judged = {d for q in (*fit.qrels.values(), *test.qrels.values()) for d in q if d in position}
    if len(position) <= cap:
        ids = list(live.doc_ids)
    else:
        rest = np.array([i for i, d in enumerate(live.doc_ids) if d not in judged])
        rng = np.random.default_rng(seed)
        extra: list[int] = []
        if len(rest):
            extra = [
                int(i)
                for i in rng.choice(rest, size=min(len(rest), max(0, cap - len(judged))), replace=False)
            ]
        keep = sorted({position[d] for d in judged} | set(extra))
        ids = [live.doc_ids[i] for i in keep]
    return ids, fixed_vectors(live.index, [position[d] for d in ids])


def _write_report(
    encoder: Encoder,
    live: Bundle,
    fit: RetrievalData,
    test: RetrievalData,
    loop: LoopResult,
    config: QueryRetrainConfig,
    train_config: TrainConfig,
    staging: Path,
    parent: str,
) -> None:
    """report/: the gap report of the tuned query tower against the fixed document vectors."""
    if not train_config.report:
        return
    from contract.bundles.report_schema import Towers
    from training.gap.report import compute_report, write_report

    ids, vectors = _report_pool(live, fit, test, config.query_report_pool, train_config.seed)
    keep = set(ids)
    pool_fit = dataclasses.replace(fit, corpus={d: fit.corpus[d] for d in ids if d in fit.corpus})
    pool_test = dataclasses.replace(test, corpus={d: test.corpus[d] for d in ids if d in test.corpus})
    pool_fit = _judged_in(pool_fit, keep)
    pool_test = _judged_in(pool_test, keep)
    k = max(1, round(float(np.mean([r["n_negatives"] for r in loop.log])))) if loop.log else 1
    report = compute_report(
        encoder, pool_fit, pool_test, k=k, seed=train_config.seed, doc_ids=ids, doc_embeddings=vectors,
        max_test_queries=train_config.eval_max_queries, max_train_queries=train_config.eval_max_queries or 300,
        k_rule=f"mean negatives per query-tower training row over {len(loop.log)} steps (in-batch + mined "
        "from the live index), rounded",
    )  # fmt: skip
    report.towers = Towers(
        query=f"tuned query tower ({config.query_tower}), trained against bundle {parent}'s fixed documents",
        documents=f"the fixed document embeddings of bundle {parent} (model/document/, not re-encoded)",
        note=TOWERS_NOTE,
    )
    report.notes.append(TOWERS_NOTE)
    if len(ids) < len(live.doc_ids):
        report.notes.append(
            f"pool: {len(ids)} of the {len(live.doc_ids)} indexed documents (every judged one plus a seeded "
            f"sample; query_report_pool {config.query_report_pool})"
        )
    write_report(report, staging / "report")
    relocate_report(staging / "report" / "report.json", MODEL_DIR)  # no build-machine path in a bundle


def _judged_in(data: RetrievalData, keep: set[str]) -> RetrievalData:
    """`data` without the judgements (and queries left without any) whose documents are not in the pool."""
    qrels = {q: {d: r for d, r in rel.items() if d in keep} for q, rel in data.qrels.items()}
    qrels = {q: rel for q, rel in qrels.items() if rel}
    return dataclasses.replace(
        data, qrels=qrels, queries={q: t for q, t in data.queries.items() if q in qrels}
    )


def _write_manifest(
    staging: Path,
    live: Bundle,
    parent: str,
    config: QueryRetrainConfig,
    train_config: TrainConfig,
    loop: LoopResult,
    shared: Mapping[str, str],
    retrieval: dict[str, Any],
    by_mode: dict[str, dict[str, float]],
    fingerprint: str,
) -> None:
    """The parent's manifest as the start: a new version id, this version's metrics, record and checksums."""
    from datetime import UTC, datetime

    from contract.bundles.run_record import TrainingRecord

    manifest = live.manifest.model_copy(deep=True)
    manifest.version = new_version_id()
    manifest.created_at = datetime.now(UTC)
    manifest.extras = {k: v for k, v in manifest.extras.items() if k not in PARENT_ONLY_EXTRAS}
    manifest.extras[FINGERPRINT_KEY] = fingerprint
    manifest.extras["retrieval"] = retrieval
    manifest.extras[EXTRAS_KEY] = {
        "parent": parent,
        "tower": config.query_tower,
        "config": config.model_dump(mode="json"),
        "steps": loop.steps,
        "seconds": loop.seconds,
        "best_step": loop.best_step,
        "best_validation_ndcg@10": loop.best_validation,
        "validation_curve": loop.curve,
        "stopped_early": loop.stopped_early,
        "shared_files": dict(shared),
        "documents_encoded": 0,
    }
    manifest.metrics = {f"test.{m}": v for m, v in by_mode.items()}
    manifest.metrics["test"] = by_mode[retrieval["default_mode"]]
    manifest.training_config = TrainingRecord.model_validate(
        {"config": train_config.model_dump(mode="json"), "query_retrain": config.model_dump(mode="json"),
         "created_at": manifest.created_at.isoformat()}
    )  # fmt: skip
    manifest.extras = portable(manifest.extras)
    manifest.files = checksums(staging)
    write_json_atomic(staging / MANIFEST_FILE, manifest.model_dump(mode="json"))


def _write_run(
    run_dir: Path,
    train_config: TrainConfig,
    config: QueryRetrainConfig,
    data_dir: str | Path,
    pairs: DistillPairs,
    base: dict[str, float],
    tuned: dict[str, float],
    loop: LoopResult,
    parent: str,
) -> None:
    """The run folder, as `train` leaves one: config.json, metrics.json, train_log.jsonl."""
    n_queries = sum(1 for k in pairs.keys if ":" not in k)
    write_json_atomic(
        run_dir / "config.json",
        {"config": train_config.model_dump(mode="json"), "query_retrain": config.model_dump(mode="json"),
         "parent": parent, "data": {"source": str(data_dir), "n_train_pairs": len(pairs.texts),
                                    "n_query_pairs": n_queries}},
    )  # fmt: skip
    write_json_atomic(
        run_dir / "metrics.json",
        {"base": base, "tuned": tuned, "base_is": f"live bundle {parent}'s query encoder",
         "validation_curve": loop.curve},
    )  # fmt: skip
    lines = "".join(json.dumps(r) + "\n" for r in loop.log)
    write_text_atomic(run_dir / "train_log.jsonl", lines)


def _attach(
    staging: Path,
    data_dir: str | Path,
    test: RetrievalData,
    train_config: TrainConfig,
    onnx: bool,
    distill: DistillConfig | None,
    timer: PhaseTimer | None,
    stop: Callable[[], None],
) -> None:
    """The tuned tower's ONNX export and quality check, and the distilled query encoders (the static
    table by default), both scored through the shared index."""
    if onnx:
        stop()
        from training.export.onnx_export import attach_onnx

        with phase(timer, "ONNX export + check"):
            attach_onnx(staging, test.queries, test.qrels, quantize=True)
    if distill is not None:
        stop()
        from training.distill.bundle_step import attach_query_encoders

        train = load_split(data_dir, train_config.train_split, seed=train_config.seed)
        with phase(timer, "distill query encoders"):
            bundle = load_bundle(staging, verify=False, mmap=True)
            try:
                doc_emb = fixed_vectors(bundle.index, range(bundle.index.ntotal))  # the shared index's rows
            finally:
                bundle.docstore.close()
            attach_query_encoders(
                staging, train, test.queries, test.qrels, config=distill, doc_embeddings=doc_emb
            )
