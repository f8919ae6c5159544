"""Paired comparison of recipe-search runs on their validation queries: is a candidate's lead noise?

    .venv/bin/python bench/recipe_compare.py WORK_DIR BASELINE_RUN CANDIDATE_RUN [CANDIDATE_RUN ...] [--data DIR]

(--data: the dataset the runs trained on, as given to bench/recipe_search.py; scifact by default.)

Each comparison is printed twice: over all validation queries, and over the "unshared" ones only, whose
relevant documents no trained query cites (like every test query, bench/carve_overlap.py).

Runs are folders written by bench/recipe_search.py (WORK_DIR/runs/NAME, or any path to a run). Every run
must have been trained without the same validation carve (same validation_fraction and seed, as in
training.data.validation_carve); the script refuses otherwise. Each model's validation nDCG@10 is recomputed per
query (corpus encoding from WORK_DIR/embeddings, which the training run filled) and each candidate is
compared with the baseline on the same queries: mean difference and a 95 % percentile interval from a
paired bootstrap over queries (training.gap.bootstrap). The test split is never read.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from contract.encoding.encoder import Encoder
from training.data.beir import load_beir
from training.data.validation_carve import carve_validation
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import encode_corpus, evaluate
from training.gap.bootstrap import bootstrap_means, percentile_ci

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
N_BOOT = 10_000


def run_folder(work: Path, name: str) -> Path:
    path = Path(name) if Path(name).is_dir() else work / "runs" / name
    if not (path / "config.json").is_file():
        raise SystemExit(f"{path}: no config.json (not a recipe_search run)")
    return path


def carve_of(run: Path) -> tuple[float, int, str]:
    config = json.loads((run / "config.json").read_text())["config"]
    return float(config["validation_fraction"]), int(config["seed"]), str(config["train_split"])


def unshared_queries(data: Path, carve: tuple[float, int, str]) -> set[str]:
    """Validation queries none of whose relevant documents is a positive of a trained query."""
    fraction, seed, split = carve
    fit, val = carve_validation(load_beir(data, split), fraction, seed)
    trained_docs = {d for rel in fit.qrels.values() for d in rel}
    return {q for q, rel in val.qrels.items() if not any(d in trained_docs for d in rel)}


def per_query_ndcg(
    data: Path, run: Path, cache: EmbeddingCache, carve: tuple[float, int, str]
) -> dict[str, float]:
    fraction, seed, split = carve
    val = carve_validation(load_beir(data, split), fraction, seed)[1]
    encoder = Encoder.load(run / "model")
    _, doc_emb = encode_corpus(encoder, val.corpus, show_progress=False, cache=cache)  # (n_docs, dim)
    result = evaluate(encoder, val, doc_embeddings=np.asarray(doc_emb), show_progress=False)
    return result.per_query["ndcg@10"]


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("runs", nargs="+", help="the baseline run first, then the candidates")
    parser.add_argument("--data", type=Path, default=SCIFACT)
    args = parser.parse_args()
    if len(args.runs) < 2:
        raise SystemExit(__doc__)
    work, data = args.work, args.data
    runs = [run_folder(work, name) for name in args.runs]
    carves = {carve_of(run) for run in runs}
    if len(carves) != 1:
        raise SystemExit(f"runs were trained without different validation carves: {sorted(carves)}")
    carve = carves.pop()
    cache = EmbeddingCache(work / "embeddings")
    scores = [per_query_ndcg(data, run, cache, carve) for run in runs]
    unshared = unshared_queries(data, carve)
    for label, queries in (("all", list(scores[0])), ("unshared", [q for q in scores[0] if q in unshared])):
        compare(runs, scores, queries, label)


def compare(runs: list[Path], scores: list[dict[str, float]], queries: list[str], label: str) -> None:
    base = np.array([scores[0][q] for q in queries])  # (n_queries,)
    rng = np.random.default_rng(0)
    print(f"validation nDCG@10, {label} {len(queries)} queries; baseline {runs[0].name} {base.mean():.4f}")
    for run, cand in zip(runs[1:], scores[1:], strict=True):
        values = np.array([cand[q] for q in queries])  # (n_queries,)
        diff = values - base
        lo, hi = percentile_ci(bootstrap_means(diff, N_BOOT, rng))
        wins, losses = int((diff > 0).sum()), int((diff < 0).sum())
        print(
            f"  {run.name}: {values.mean():.4f}, difference {diff.mean():+.4f} "
            f"(95% paired bootstrap {lo:+.4f} .. {hi:+.4f}); queries better {wins}, worse {losses}"
        )


if __name__ == "__main__":
    main()
