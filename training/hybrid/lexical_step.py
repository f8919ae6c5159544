"""The index step's lexical part: BM25 into the staged bundle, fusion tuned on validation, metrics per mode.

Called between `build_bundle` and `BundleStore.publish` (like attach_onnx): it writes `lexical/`, then
rewrites the manifest with

- `extras["retrieval"]`: the served default mode and fusion parameters, chosen on the validation split
  carved from the training queries (training.hybrid.fusion_tuning), with every candidate's validation nDCG@10;
- `metrics["test.dense"]`, `["test.lexical"]`, `["test.hybrid"]`: held-out metrics of each mode;
- `metrics["test"]`: those of the default mode, what the quality gate compares with the live bundle's;
- the checksums, now covering `lexical/`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.encoding.encoder import Encoder, document_text
from contract.errors import DataError
from contract.index.fusion import DEFAULT_DEPTH, MODES, FusionParams
from contract.index.lexical_index import LexicalIndex
from contract.index.vector_index import Ranking
from training.data.retrieval_data import RetrievalData
from training.data.split import load_split
from training.data.validation_carve import carve_validation
from training.eval.evaluate import exact_search
from training.hybrid.bm25_build import LEXICAL_DIR, build_lexical_index
from training.hybrid.fusion_tuning import metrics_of, runs_for_mode, tune

if TYPE_CHECKING:
    from training.data.retrieval_data import Document

logger = logging.getLogger(__name__)

EXTRAS_KEY = "retrieval"


def validation_split(data_dir: str | Path, training_config: dict[str, Any]) -> RetrievalData | None:
    """The validation queries the model was trained without: the run's own carve (same fraction, seed),
    or for an untrained model the default carve of the train split; None when there is no train split."""
    config = training_config.get("config", {}) if isinstance(training_config.get("config"), dict) else {}
    fraction = float(config.get("validation_fraction", 0.2 if not config else 0.0))
    seed = int(config.get("seed", 0))
    try:
        train = load_split(data_dir, str(config.get("train_split", "train")), seed=seed)
    except DataError as exc:
        logger.info("no validation split for fusion tuning (%s): hybrid keeps untuned defaults", exc)
        return None
    val = carve_validation(train, fraction, seed)[1]
    return val if val.queries else None


def mode_runs(
    data: RetrievalData,
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    encoder: Encoder,
    lex: LexicalIndex,
    depth: int,
) -> tuple[dict[str, Ranking], dict[str, Ranking]]:
    scores, idx = exact_search(query_emb, doc_emb, depth, similarity=encoder.similarity_matrix)  # (n, depth)
    dense = {q: (idx[i], scores[i]) for i, q in enumerate(data.queries)}
    lexical = dict(zip(data.queries, lex.search(list(data.queries.values()), depth), strict=True))
    return dense, lexical


def attach_lexical(
    staging: str | Path,
    encoder: Encoder,
    test: RetrievalData,
    doc_emb: np.ndarray,
    test_query_emb: np.ndarray,
    validation: RetrievalData | None,
    *,
    depth: int = DEFAULT_DEPTH,
    bundle_corpus: Mapping[str, Document] | None = None,
) -> dict[str, Any]:
    """Build `lexical/` in the staged bundle, tune and score the modes, rewrite its manifest; returns
    the `extras["retrieval"]` record. `doc_emb` rows follow test.corpus. `bundle_corpus` (default
    test.corpus) is the bundle's own documents in ids.json order: with documents written through the API
    folded in (training/publish/mutation_fold.py) it differs from the dataset, and the modes are still scored on the
    dataset as it is, like the gate."""
    from contract.atomic import write_json_atomic
    from contract.bundles.bundle import MANIFEST_FILE, checksums, read_manifest

    folder = Path(staging)
    doc_ids = list(test.corpus)
    served = test.corpus if bundle_corpus is None else bundle_corpus
    build_lexical_index([document_text(d.title, d.text) for d in served.values()], folder / LEXICAL_DIR)
    if list(served) == doc_ids:
        lex = LexicalIndex.load(folder / LEXICAL_DIR)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            texts = [document_text(d.title, d.text) for d in test.corpus.values()]
            build_lexical_index(texts, Path(tmp) / LEXICAL_DIR)
            lex = LexicalIndex.load(Path(tmp) / LEXICAL_DIR)
    if validation is not None and list(validation.corpus) == doc_ids:
        val_emb = encoder.encode(list(validation.queries.values()), kind="query")  # (n_val, dim)
        dense, lexical = mode_runs(validation, val_emb, doc_emb, encoder, lex, depth)
        record = tune(dense, lexical, validation.qrels, doc_ids, depth=depth)
    else:  # nothing to tune on: serve dense as before, hybrid with the untuned RRF defaults
        record = {"default_mode": "dense", "fusion": FusionParams(depth=depth).record(), "validation": None}
    params = FusionParams.from_record(record["fusion"])
    dense, lexical = mode_runs(test, test_query_emb, doc_emb, encoder, lex, depth)
    by_mode = {m: metrics_of(runs_for_mode(m, dense, lexical, params), test.qrels, doc_ids) for m in MODES}
    record["lexical"] = lex.params
    manifest = read_manifest(folder).model_copy(deep=True)
    for mode, values in by_mode.items():
        manifest.metrics[f"test.{mode}"] = values
    manifest.metrics["test"] = by_mode[record["default_mode"]]
    manifest.extras[EXTRAS_KEY] = record
    manifest.files = checksums(folder)
    write_json_atomic(folder / MANIFEST_FILE, manifest.model_dump(mode="json"))
    logger.info(
        "retrieval modes, test nDCG@10: %s; default %s (%s)",
        ", ".join(f"{m} {v['ndcg@10']:.4f}" for m, v in by_mode.items()),
        record["default_mode"],
        record["fusion"],
    )
    return record
