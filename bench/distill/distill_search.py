"""Search for the distillation recipe of the query encoders, selecting on a validation split only.

    nice -n 5 .venv/bin/python -m bench distill_search NAME '{"variants": ["static"], "static_lr": 0.05}' ...

Each argument after the first is one configuration: JSON overrides of DistillConfig's defaults. Each is
trained on scifact's qrels/train.tsv minus the seeded validation share (training.data.validation_carve, fraction 0.2,
seed 0, as bench/training/recipe_search.py) plus corpus pseudo-queries, against the fixed document vectors of the
load bench's bundle (var/bench/bundles, built by bench/serving/load_bench.py), and scored on the held-out training
queries: its nDCG@10 next to the full query encoder's on the same queries, and its wall time. Results are
appended to bench/results/distill_search.json under NAME. The test split is never read, except by

    nice -n 5 .venv/bin/python -m bench distill_search --final NAME CONFIG ...

run once for the chosen recipe: trained on every training query, scored on scifact's 300 test queries
("test_runs"; bench/distill/distill_scifact.py gives the same through the pipeline step, into a bundle), or

    nice -n 5 .venv/bin/python -m bench distill_search --score-test SAVED

which scores a student saved by a validation run (var/bench/distill_search/students/SAVED) on the test
queries without retraining it (for the truncated transformer, whose training is the costly part).

    nice -n 5 .venv/bin/python -m bench distill_search --compare SAVED SAVED ...

puts saved validation-run students side by side on the validation carve: each one's nDCG@10 difference to
the first one and to the full encoder, with a 95% paired bootstrap interval over the queries (107 queries
tell apart only differences of about 0.02 or more).

To keep a configuration's cost to its training steps, var/bench/distill_search/ caches the teacher's
(full query encoder's) vectors of every training text, by text, and the model2vec-style token table
before its SIF weights (training.distill.students.static_init with weights of 1).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.harness.paths import REPO, require_scifact
from bench.harness.paths import RESULTS as RESULTS_DIR
from bench.harness.usage import asked_for_help
from contract.atomic import write_json_atomic
from contract.bundles.bundle import MODEL_DIR, load_bundle
from contract.encoding.encoder import document_text
from training.bundle.store import BundleStore
from training.data.beir import load_beir
from training.data.retrieval_data import RetrievalData
from training.data.validation_carve import carve_validation
from training.distill.bundle_step import bundle_doc_embeddings
from training.distill.config import DistillConfig
from training.distill.loop import DistillTargets, Student, fit_student
from training.distill.pairs import distill_pairs
from training.distill.students import static_init, token_counts
from training.distill.students_fit import distilled_student, pair_negatives, static_student_of
from training.eval.evaluate import trec_metrics

BUNDLES = REPO / "var" / "bench" / "bundles"
WORK = REPO / "var" / "bench" / "distill_search"
BASE_ONNX = REPO / "var" / "bench" / "base-onnx"
RESULTS = RESULTS_DIR / "distill_search.json"
VALIDATION_FRACTION, VALIDATION_SEED = 0.2, 0
# rows before this field held out single queries (leaky: validation queries shared relevant documents
# with trained ones); training.data.validation_carve now holds out whole groups of queries that share one
CARVE = "whole query groups"


class TeacherCache:
    """The full query encoder's vectors (the teacher's) by text, kept in one .npz between runs."""

    def __init__(self, path: Path, encoder: Any):
        self.path, self.encoder = path, encoder
        self.rows: dict[str, np.ndarray] = {}
        if path.exists():
            data = np.load(path, allow_pickle=False)
            self.rows = dict(zip(data["texts"].tolist(), data["emb"], strict=True))

    def encode(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self.rows})
        if missing:
            logging.info("teacher: encoding %d new texts", len(missing))
            for start in range(0, len(missing), 2048):
                chunk = missing[start : start + 2048]
                self.rows.update(
                    zip(chunk, self.encoder.encode(chunk, kind="query", batch_size=64), strict=True)
                )
            keys = list(self.rows)
            tmp = self.path.with_suffix(".tmp.npz")
            np.savez(tmp, texts=np.array(keys), emb=np.stack([self.rows[k] for k in keys]))
            os.replace(tmp, self.path)
        return np.stack([self.rows[t] for t in texts]).astype(np.float32)  # (n, D)


def static_student(
    model_dir: Path, raw_table: np.ndarray, counts: np.ndarray, config: DistillConfig
) -> Student:
    """training.distill.students_fit._static_student with the token table read from the cache."""
    return static_student_of(model_dir, raw_table, counts, config)


def raw_token_table(model_dir: Path, corpus_texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(vocab, D) token rows before SIF weighting, and the corpus token counts (vocab,)."""
    from transformers import AutoTokenizer

    table_path, counts_path = WORK / "token_table.npy", WORK / "token_counts.npy"
    if not table_path.exists():
        # sif_a huge: weights a/(a+p) are 1 to float precision, the rows are the model's token vectors
        np.save(table_path, static_init(model_dir, corpus_texts, sif_a=1e12))
    if not counts_path.exists():
        np.save(counts_path, token_counts(AutoTokenizer.from_pretrained(str(model_dir)), corpus_texts))
    return np.load(table_path), np.load(counts_path)


def per_query_ndcg(
    query_emb: np.ndarray, doc_emb: np.ndarray, doc_ids: list[str], val: RetrievalData
) -> dict[str, float]:
    """nDCG@10 of each validation query by its vector (rows of `query_emb` (n, D)), exact inner product."""
    qids = [q for q in val.queries if val.qrels.get(q)]
    scores = query_emb @ doc_emb.T  # (n, N)
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {doc_ids[int(j)]: float(scores[r, j]) for j in top[r]} for r, q in enumerate(qids)}
    return dict(trec_metrics({q: dict(val.qrels[q]) for q in qids}, run, k_values=(10,))["ndcg@10"])


def ndcg(query_emb: np.ndarray, doc_emb: np.ndarray, doc_ids: list[str], val: RetrievalData) -> float:
    """Mean nDCG@10 of the validation queries' vectors (n, D) by exact inner product over the documents."""
    return round(float(np.mean(list(per_query_ndcg(query_emb, doc_emb, doc_ids, val).values()))), 4)


def train_student(
    student: Student,
    pairs: Any,
    teacher_q: np.ndarray,
    negatives: Any,
    setup: dict[str, Any],
    config: DistillConfig,
    rng: np.random.Generator,
    on_step: Any,
) -> dict[str, Any]:
    return fit_student(
        student,
        DistillTargets(pairs, setup["doc_emb"], teacher_q, negatives),
        temperature=setup["temperature"],
        config=config,
        rng=rng,
        on_step=on_step,
    )


def run_config(
    overrides: dict[str, Any], fit: RetrievalData, val: RetrievalData, setup: dict[str, Any]
) -> dict[str, Any]:
    """Train one configuration and score it on validation.

    Two bench-only keys besides DistillConfig's: "untrained": true scores the student as initialised
    (no step), "eval_every": N records the validation nDCG@10 every N steps ("curve").
    """
    overrides = dict(overrides)
    untrained, eval_every = bool(overrides.pop("untrained", False)), int(overrides.pop("eval_every", 0))
    config = DistillConfig(**overrides)
    (variant,) = config.variants
    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    pairs = distill_pairs(fit, setup["doc_ids"], config, rng)
    teacher_q = setup["teacher"].encode(pairs.texts)
    negatives = pair_negatives(teacher_q, setup["doc_emb"], pairs, config, rng)
    student = (
        static_student(setup["model_dir"], setup["raw_table"], setup["counts"], config)
        if variant == "static"
        else distilled_student(setup["model_dir"], config)
    )
    val_texts = [val.queries[q] for q in val.queries if val.qrels.get(q)]

    def val_ndcg() -> float:
        emb = student.model.encode(val_texts, batch_size=64, normalize_embeddings=True)
        return ndcg(np.asarray(emb, dtype=np.float32), setup["doc_emb"], setup["doc_ids"], val)

    curve: list[tuple[int, float]] = []

    def on_step(step: int) -> None:
        if eval_every and step % eval_every == 0:
            curve.append((step, val_ndcg()))
            student.model.train()  # encode() switched it to eval mode
            logging.info("step %d: validation nDCG@10 %.4f", step, curve[-1][1])

    info: dict[str, Any] = {"steps": 0, "seconds": 0.0, "loss_first": None, "loss_last": None}
    if not untrained:
        info = train_student(student, pairs, teacher_q, negatives, setup, config, rng, on_step)
    student.model.eval()
    saved = WORK / "students" / f"{setup['name']}-{setup['index']}"
    student.model.save(str(saved), safe_serialization=True)  # for a later --score-test
    row = {
        "overrides": {**overrides, **({"untrained": True} if untrained else {})},
        "variant": variant,
        "val_ndcg@10": val_ndcg(),
        "val_ndcg@10_full": setup["full_val"],
        "n_pairs": len(pairs.texts),
        "steps": info["steps"],
        "loss_first": info["loss_first"],
        "loss_last": info["loss_last"],
        "train_s": info["seconds"],
        "s_per_step": round(info["seconds"] / info["steps"], 3) if info["steps"] else None,
        "wall_s": round(time.perf_counter() - started, 1),
        "saved": saved.name,
        "carve": CARVE,
        "load_before": round(os.getloadavg()[0], 2),
    }
    return row | ({"curve": curve} if curve else {})


def score_saved_on_test(saved: str) -> None:
    """A student saved by a validation run, scored once on the 300 test queries (no retraining)."""
    from sentence_transformers import SentenceTransformer

    store = BundleStore(BUNDLES)
    bundle = load_bundle(store.version_path(str(store.current_version())), verify=False)
    doc_emb = np.ascontiguousarray(bundle_doc_embeddings(bundle), dtype=np.float32)  # (N, D)
    test = load_beir(require_scifact(), "test")
    texts = [test.queries[q] for q in test.queries if test.qrels.get(q)]
    full = bundle.encoder.encode(texts, kind="query")
    student = SentenceTransformer(str(WORK / "students" / saved), device="cpu")
    emb = np.asarray(student.encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32)
    row = {
        "saved": saved,
        "trained_on": "the validation run's fit side (training queries minus the validation carve)",
        "test_ndcg@10": ndcg(emb, doc_emb, list(bundle.doc_ids), test),
        "test_ndcg@10_full": ndcg(full, doc_emb, list(bundle.doc_ids), test),
    }
    bundle.docstore.close()
    print(json.dumps(row), flush=True)
    results = json.loads(RESULTS.read_text())
    results.setdefault("test_runs", []).append(row)
    write_json_atomic(RESULTS, results)


def compare_saved(saved: list[str]) -> None:
    """Saved validation-run students against the first one and the full encoder, on the validation carve:
    each mean difference with its 95% paired bootstrap interval over queries (training.gap.bootstrap)."""
    from sentence_transformers import SentenceTransformer

    from training.gap.bootstrap import bootstrap_means, percentile_ci

    store = BundleStore(BUNDLES)
    bundle = load_bundle(store.version_path(str(store.current_version())), verify=False)
    doc_emb = np.ascontiguousarray(bundle_doc_embeddings(bundle), dtype=np.float32)  # (N, D)
    doc_ids = list(bundle.doc_ids)
    _, val = carve_validation(load_beir(require_scifact(), "train"), VALIDATION_FRACTION, VALIDATION_SEED)
    texts = [val.queries[q] for q in val.queries if val.qrels.get(q)]
    full = per_query_ndcg(bundle.encoder.encode(texts, kind="query"), doc_emb, doc_ids, val)
    bundle.docstore.close()
    scores = {"full": full}
    for name in saved:
        student = SentenceTransformer(str(WORK / "students" / name), device="cpu")
        emb = student.encode(texts, batch_size=64, normalize_embeddings=True)
        scores[name] = per_query_ndcg(np.asarray(emb, dtype=np.float32), doc_emb, doc_ids, val)
    queries = sorted(full)
    rng = np.random.default_rng(0)
    rows = []
    for name in saved:
        row: dict[str, Any] = {
            "saved": name,
            "val_ndcg@10": round(float(np.mean(list(scores[name].values()))), 4),
        }
        for ref in dict.fromkeys(["full", saved[0]]):
            if ref == name:
                continue
            diff = np.array([scores[name][q] - scores[ref][q] for q in queries])  # (n_queries,)
            lo, hi = percentile_ci(bootstrap_means(diff, 10_000, rng))
            row[f"vs_{ref}"] = [round(float(diff.mean()), 4), round(lo, 4), round(hi, 4)]
        print(json.dumps(row), flush=True)
        rows.append(row)
    results = json.loads(RESULTS.read_text())
    results.setdefault("comparisons", []).append({"carve": CARVE, "n_queries": len(queries), "rows": rows})
    write_json_atomic(RESULTS, results)


def append_result(name: str, row: dict[str, Any], final: bool, n_val: int, full_val: float) -> None:
    """The run's row appended to the results file (runs, or test_runs for --final), atomically."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("runs", [])
    results.setdefault("test_runs", [])
    results["validation"] = {
        "fraction": VALIDATION_FRACTION,
        "seed": VALIDATION_SEED,
        "n_queries": n_val,
        "bundle": "scifact corpus, base all-MiniLM-L6-v2, exact index (bench/serving/load_bench.py)",
        "carve": CARVE,
        "full_val_ndcg@10": full_val,
    }
    if final:
        row = {k.replace("val_", "test_"): v for k, v in row.items()}
        row["carve"] = "none: trained on every training query, scored on the test split"
    results["test_runs" if final else "runs"].append({"name": name, **row})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS, results)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if argv[0] == "--score-test":
        score_saved_on_test(argv[1])
        return
    if argv[0] == "--compare":
        compare_saved(argv[1:])
        return
    final = argv[0] == "--final"
    args = argv[1:] if final else argv
    name, configs = args[0], [json.loads(a) for a in args[1:]]
    WORK.mkdir(parents=True, exist_ok=True)
    store = BundleStore(BUNDLES)
    live = store.current_version()
    if live is None:
        raise SystemExit(
            f"{BUNDLES}: nothing is live; run `python -m bench load_bench --bundles DIR` once to build it"
        )
    bundle = load_bundle(store.version_path(live), verify=False)
    doc_emb = np.ascontiguousarray(bundle_doc_embeddings(bundle), dtype=np.float32)  # (N, D)
    doc_ids = list(bundle.doc_ids)
    bundle.docstore.close()
    if final:  # the chosen recipe, once: trained on every training query, scored on the test split
        fit, val = load_beir(require_scifact(), "train"), load_beir(require_scifact(), "test")
    else:
        fit, val = carve_validation(
            load_beir(require_scifact(), "train"), VALIDATION_FRACTION, VALIDATION_SEED
        )
    model_dir = store.version_path(live) / MODEL_DIR
    # the ONNX fp32 export of the same base model (cosine 1.0000 to torch, bench/serving/load_bench.py), ~2x faster
    from contract.encoding.onnx_encoder import OnnxQueryEncoder

    teacher = TeacherCache(WORK / "teacher.npz", OnnxQueryEncoder.load(BASE_ONNX, variant="fp32"))
    val_texts = [val.queries[q] for q in val.queries if val.qrels.get(q)]
    corpus_texts = [document_text(d.title, d.text) for d in fit.corpus.values()]
    raw_table, counts = raw_token_table(model_dir, corpus_texts)
    setup = {
        "doc_emb": doc_emb,
        "doc_ids": doc_ids,
        "model_dir": model_dir,
        "teacher": teacher,
        "raw_table": raw_table,
        "counts": counts,
        "temperature": bundle.encoder.similarity.logit_divisor(),
        "full_val": ndcg(teacher.encode(val_texts), doc_emb, doc_ids, val),
    }
    for index, overrides in enumerate(configs):
        setup |= {"name": name, "index": index}
        row = run_config(overrides, fit, val, setup)
        print(json.dumps(row), flush=True)
        append_result(name, row, final, len(val_texts), setup["full_val"])


if __name__ == "__main__":
    main()
