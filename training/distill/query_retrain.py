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

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contract.atomic import write_text_atomic
from contract.bundles.bundle import (
    MODEL_DIR,
    Bundle,
    load_bundle,
)
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.encoding.similarity import SIMILARITY_FILE
from contract.errors import ConfigError
from contract.jobs.plan import RetrainPlan
from contract.query_config import QueryRetrainConfig
from training.bundle.store import BundleStore, PublishResult, evaluation_fingerprint
from training.data.retrieval_data import RetrievalData
from training.data.validation_carve import carve_validation
from training.distill.config import DistillConfig, publication_distill
from training.distill.pairs import DistillPairs, distill_pairs
from training.distill.query_bundle import (
    TowerScores,
    TrainedTower,
    dense_runs,
    link_shared,
    retune_modes,
    write_manifest,
    write_run,
)
from training.distill.query_eligibility import query_side_blocker
from training.distill.query_loop import FixedDocs, LoopControl, LoopResult, TowerTargets, fit_query_tower
from training.distill.query_report import ReportedRetrain, write_query_report
from training.distill.query_tower import fixed_vectors, merged, query_tower
from training.eval.search_metrics import search_metrics
from training.train.phase_timer import phase
from training.train.run_hooks import RunHooks

logger = logging.getLogger(__name__)


@dataclass
class QueryRetrainResult:
    publish: PublishResult | None  # None: not published (`train --retrain-scope query`)
    parent: str
    base_metrics: dict[str, float]  # the live query encoder on the test split, through the shared index
    tuned_metrics: dict[str, float]  # the tuned query tower, the same way
    loop: LoopResult
    shared: dict[str, str]  # child path -> linked | copied
    run_dir: Path
    seconds: float


def query_side_retrain(
    plan: RetrainPlan, run_dir: str | Path, hooks: RunHooks | None = None, *, publish: bool = True
) -> QueryRetrainResult:
    """Train a query tower against the live bundle of the plan's bundles folder and publish it as a new
    version sharing the live index (see the module docstring). The plan's TrainConfig gives the splits,
    the validation carve, the seed, `max_steps` and `eval_max_queries` (the report's queries), its
    QueryRetrainConfig the tower's knobs. `publish=False` (`train --retrain-scope query`): the two-tower
    model and its report go into `run_dir` instead; nothing is published."""
    started = time.perf_counter()
    hooks = hooks or RunHooks()
    store = BundleStore(plan.publication.bundles_dir, keep=plan.publication.keep)
    with phase(hooks.timer, "load data + live bundle"):
        splits = retrain_splits(plan.data.data_dir, plan.training, hooks)
        if not plan.live_eligible:  # not already checked (resolve_scope, for `auto`)
            blocker = query_side_blocker(store, plan.data.data_dir, plan.data.eval_split, data=splits[2])
            if blocker is not None:
                raise ConfigError(f"--retrain-scope query: {blocker}")
        parent_dir = store.version_path(str(store.current_version()))
        live = load_bundle(parent_dir, verify=False, mmap=True)  # publishing verifies every checksum
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    published = None
    try:
        with store.build_dir() as staging:
            tower, scores = _stage(plan, live, parent_dir, splits, (staging, run_dir), hooks)
            if not publish:
                _keep_in_run(staging, run_dir)
            else:
                _attach(staging, plan, splits[2], hooks)
                hooks.stop()  # the last moment a cancel is honoured
                with phase(hooks.timer, "publish"):
                    published = store.publish(staging, gate=plan.publication)
    finally:
        live.docstore.close()
    return QueryRetrainResult(
        published, tower.parent, scores.base, scores.tuned, tower.loop, dict(tower.shared), run_dir,
        time.perf_counter() - started,
    )  # fmt: skip


def _stage(
    plan: RetrainPlan,
    live: Bundle,
    parent_dir: Path,
    splits: tuple[RetrievalData, RetrievalData, RetrievalData],
    folders: tuple[Path, Path],
    hooks: RunHooks,
) -> tuple[TrainedTower, TowerScores]:
    """Train the tower, then stage the new version in `folders` (staging, run folder): shared files,
    the tuned tower, its scores, report, manifest and run record."""
    (fit, val, test), (staging, run_dir) = splits, folders
    seed = plan.training.seed
    with phase(hooks.timer, "query pairs + mine negatives (live index)"):
        pairs, negatives, docs = training_inputs(live, fit, plan.query, seed)
    hooks.stop()
    tower = query_tower(parent_dir / MODEL_DIR, plan.query, seed=seed)
    validate = carve_validator(live, tower.model, val)
    control = LoopControl(seed, plan.training.max_steps, validate, hooks.on_progress, hooks.timer)
    loop = fit_query_tower(
        tower, TowerTargets(pairs, docs, negatives),
        temperature=live.encoder.similarity.logit_divisor(), config=plan.query, control=control,
    )  # fmt: skip
    hooks.stop()
    with phase(hooks.timer, "stage version (shared files, metrics, report)"):
        shared = link_shared(parent_dir, staging, live.manifest.files)
        encoder = _save_tower(merged(tower), parent_dir, staging)
        trained = TrainedTower(parent_dir.name, loop, shared, pairs)
        scores = TowerScores(*_score(live, encoder, val, test), evaluation_fingerprint(test))
        retrain = ReportedRetrain(live, trained.parent, plan.query, plan.training)
        write_query_report(encoder, fit, test, loop, retrain, staging)
        write_manifest(staging, live, plan, trained, scores)
        write_run(run_dir, plan, trained, scores)
    return trained, scores


def _keep_in_run(staging: Path, run_dir: Path) -> None:
    """Unpublished (`train`): the two-tower model and its report into the run folder."""
    shutil.copytree(staging / MODEL_DIR, run_dir / MODEL_DIR, dirs_exist_ok=True)
    if (staging / "report").is_dir():
        shutil.copytree(staging / "report", run_dir / "report", dirs_exist_ok=True)


def retrain_splits(
    data_dir: str | Path, config: TrainConfig, hooks: RunHooks | None = None
) -> tuple[RetrievalData, RetrievalData, RetrievalData]:
    """(pairs to fit, the validation carve, the whole evaluation split); through the run's hooks, which keep
    the splits a run has loaded, when given."""
    hooks = hooks or RunHooks()
    train = hooks.split(data_dir, config.train_split, seed=config.seed)
    fit, val = carve_validation(train, config.validation_fraction, config.seed)
    return fit, val, hooks.split(data_dir, config.eval_split, seed=config.seed)


def training_inputs(
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


def carve_validator(live: Bundle, tower: Any, val: RetrievalData) -> Callable[[], float] | None:
    """nDCG@10 of the validation carve through the live index, queries encoded by the tower as it is."""
    qids = [q for q in val.queries if val.qrels.get(q)]
    if not qids:
        return None
    texts = [val.queries[q] for q in qids]

    def score() -> float:
        q = encode_queries(tower, texts)
        return search_metrics(live.encoder.similarity, q, qids, val.qrels, live.doc_ids, index=live.index)[
            "ndcg@10"
        ]

    return score


def encode_queries(model: Any, texts: Sequence[str]) -> np.ndarray:
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


def _attach(staging: Path, plan: RetrainPlan, test: RetrievalData, hooks: RunHooks) -> None:
    """The tuned tower's ONNX export and quality check, and the distilled query encoders (the static
    table by default), both scored through the shared index."""
    if plan.publication.onnx:
        hooks.stop()
        from training.export.onnx_export import attach_onnx

        with phase(hooks.timer, "ONNX export + check"):
            attach_onnx(staging, test.queries, test.qrels, quantize=True)
    distill = publication_distill(plan.publication)
    if distill is not None:
        hooks.stop()
        from training.distill.bundle_step import attach_query_encoders

        train = hooks.split(plan.data.data_dir, plan.training.train_split, seed=plan.training.seed)
        with phase(hooks.timer, "distill query encoders"):
            bundle = load_bundle(staging, verify=False, mmap=True)
            try:
                doc_emb = fixed_vectors(bundle.index, range(bundle.index.ntotal))  # the shared index's rows
            finally:
                bundle.docstore.close()
            attach_query_encoders(
                staging, train, test.queries, test.qrels, config=distill, doc_embeddings=doc_emb
            )
