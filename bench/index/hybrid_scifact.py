"""scifact nDCG@10 per retrieval mode: dense, lexical (BM25), hybrid by RRF and by convex fusion.

    .venv/bin/python -m bench hybrid_scifact WORK_DIR [MODEL_DIR] [--seed 0 --validation-fraction 0.2]

MODEL_DIR: a training run (its config.json gives the validation carve it was trained without) or none
for the base all-MiniLM-L6-v2. The fusion parameters are tuned on the validation queries carved from
qrels/train.tsv (training.data.validation_carve, training.hybrid.fusion_tuning); the test split is scored once per mode
with the tuned parameters, for both fusion methods, so RRF and convex are compared on equal terms.
The corpus encoding comes from WORK_DIR/embeddings (training.eval.embedding_cache) when it is there.
Appends the table to bench/results/hybrid_scifact.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

from bench.harness.paths import RESULTS as RESULTS_DIR
from bench.harness.paths import require_scifact
from contract.atomic import write_json_atomic
from contract.encoding.encoder import Encoder, document_text
from contract.index.fusion import FusionParams
from contract.index.lexical_index import LexicalIndex
from training.data.beir import load_beir
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import encode_corpus
from training.hybrid.bm25_build import build_lexical_index
from training.hybrid.fusion_tuning import metrics_of, runs_for_mode, tune
from training.hybrid.lexical_step import mode_runs, validation_split
from training.publish.provenance import resolve_run

RESULTS = RESULTS_DIR / "hybrid_scifact.json"


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--label", default=None)
    args = ap.parse_args(argv)
    model_path, run = (None, None) if args.model is None else resolve_run(args.model)
    training_config = json.loads((run / "config.json").read_text()) if run is not None else {}
    encoder = Encoder.load(model_path)
    test = load_beir(require_scifact(), "test")
    validation = validation_split(require_scifact(), training_config)
    assert validation is not None
    doc_ids, doc_emb = encode_corpus(encoder, test.corpus, cache=EmbeddingCache(args.work / "embeddings"))
    with tempfile.TemporaryDirectory() as tmp:
        texts = [document_text(d.title, d.text) for d in test.corpus.values()]
        lex = LexicalIndex.load(build_lexical_index(texts, Path(tmp) / "lexical"))
        val_emb = encoder.encode(list(validation.queries.values()), kind="query")
        depth = 100
        vd, vl = mode_runs(validation, val_emb, doc_emb, encoder, lex, depth)
        record = tune(vd, vl, validation.qrels, doc_ids, depth=depth)
        v = record["validation"]
        best_k = max(v["rrf_k"], key=lambda k: v["rrf_k"][k])
        best_a = max(v["convex_alpha"], key=lambda a: v["convex_alpha"][a])
        test_emb = encoder.encode(list(test.queries.values()), kind="query")
        td, tl = mode_runs(test, test_emb, doc_emb, encoder, lex, depth)
    rows = {
        "dense": (v["modes"]["dense"], metrics_of(td, test.qrels, doc_ids)),
        "lexical (BM25)": (v["modes"]["lexical"], metrics_of(tl, test.qrels, doc_ids)),
    }
    for name, params, val in (
        (f"hybrid RRF k={best_k}", FusionParams("rrf", rrf_k=float(best_k), depth=depth), v["rrf_k"][best_k]),
        (
            f"hybrid convex alpha={best_a}",
            FusionParams("convex", alpha=float(best_a), depth=depth),
            v["convex_alpha"][best_a],
        ),
    ):
        rows[name] = (val, metrics_of(runs_for_mode("hybrid", td, tl, params), test.qrels, doc_ids))
    # the run folder's own name, not its path on this machine: the results file is committed
    label = args.label or (f"WORK/runs/{args.model.name}" if args.model else "base all-MiniLM-L6-v2")
    print(
        f"model: {label}; validation: {v['n_queries']} train queries held out; chosen: {record['default_mode']} "
        f"{record['fusion']}"
    )
    print("| mode | validation nDCG@10 | test nDCG@10 | test recall@100 |")
    print("|---|---:|---:|---:|")
    for name, (val, m) in rows.items():
        print(f"| {name} | {val:.4f} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} |")
    out = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    out = [r for r in out if r["model"] != label] + [
        {
            "model": label,
            "chosen": {"default_mode": record["default_mode"], "fusion": record["fusion"]},
            "validation": v,
            "test": {name: {k: round(x, 4) for k, x in m.items()} for name, (_, m) in rows.items()},
        }
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS, out, newline=True)


if __name__ == "__main__":
    main()
