"""The distillation recipe chosen across corpora: every candidate scored on each corpus's own held-out split.

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python -m bench distill_corpora prepare
    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python -m bench distill_corpora \\
        run NAME '{"variants": ["static"], "static_pca_dims": 256}' [NAME CONFIG ...] [--corpora scifact,pydocs]
    .venv/bin/python -m bench distill_corpora table

Five corpora of different kinds (bench/harness/corpora.py builds and caches them under var/bench/corpora/):
scifact (claims → abstracts), pydocs (the demo's standard-library docstrings: summary → rest of the
docstring), manpages (the installed manual pages: NAME summary → DESCRIPTION; training/data/man_pages.py),
debpkgs (dpkg's package descriptions: synopsis → extended description; training/data/debian_packages.py)
and pycode (standard-library functions: docstring summary → code; training/data/code_search.py). A corpus
whose source is missing is skipped with a line saying so.

Each configuration (JSON overrides of DistillConfig's defaults, one variant) is trained, per corpus, on
that corpus's training queries minus a seeded validation carve (training.data.validation_carve, 0.2,
seed 0) plus its pseudo-queries, against the base model's fixed document vectors, and scored on the
carve's held-out queries by exact search: nDCG@10 next to the full query encoder's on the same queries,
with a 95 % paired bootstrap interval of the difference. The test splits are never read here (the chosen
recipe's test numbers come from the bundles bench/serving/load_bench.py builds with the pipeline's distillation
step). Per run it also measures routing (app/engine/query_routing.py): the student's top-1 − top-2 score
margin, and the nDCG@10 when the queries with the smallest margins (10 … 50 %) are encoded by the full
model instead, plus the smallest share that brings the loss within 0.005 and 0.01.

Results go to bench/results/distill_corpora.json (one row per configuration and corpus); `table` prints
every candidate on every corpus. Caches (var/bench/distill_corpora/): the teacher's vectors by text per
corpus, and the model2vec token table (every vocabulary token through the full model, unweighted;
corpus-independent).
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

from bench.distill.distill_search import TeacherCache, per_query_ndcg
from bench.harness.corpora import CORPORA, Corpus, corpus_setup
from bench.harness.paths import REPO
from bench.harness.paths import RESULTS as RESULTS_DIR
from bench.harness.usage import asked_for_help
from contract.atomic import write_json_atomic
from contract.encoding.encoder import default_model_path, document_text
from training.data.validation_carve import carve_validation
from training.distill.config import DistillConfig
from training.distill.loop import DistillTargets, fit_student
from training.distill.pairs import distill_pairs
from training.distill.students import token_counts, token_table
from training.distill.students_fit import distilled_student, pair_negatives, static_student_of
from training.gap.bootstrap import bootstrap_means, percentile_ci

WORK = REPO / "var" / "bench" / "distill_corpora"
RESULTS = RESULTS_DIR / "distill_corpora.json"
VALIDATION_FRACTION, VALIDATION_SEED = 0.2, 0
ROUTE_SHARES = (0.1, 0.2, 0.3, 0.5)
TEMPERATURE = 0.05  # the base model's τ (contract.encoding.similarity.DEFAULT_TEMPERATURE)


def raw_table(model_dir: Path) -> np.ndarray:
    """(vocab, D) every token through the full model alone, unweighted (corpus-independent), cached."""
    path = WORK / "token_table.npy"
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        table, _ = token_table(model_dir, [])
        np.save(path, table)
    return np.load(path)


def margins(query_emb: np.ndarray, doc_emb: np.ndarray) -> np.ndarray:
    """(n,) top-1 − top-2 inner product of each query (n, D) over the documents (N, D)."""
    scores = query_emb @ doc_emb.T  # (n, N)
    top2 = -np.partition(-scores, 1, axis=1)[:, :2]  # (n, 2), unordered within
    return np.abs(top2[:, 0] - top2[:, 1])


def routing(student: dict[str, float], full: dict[str, float], margin: dict[str, float]) -> dict[str, Any]:
    """nDCG@10 when the smallest-margin queries go to the full model, per share, and the share needed."""
    qids = sorted(student, key=lambda q: margin[q])  # least confident first
    s = np.array([student[q] for q in qids])
    f = np.array([full[q] for q in qids])
    full_mean = float(f.mean())
    curve = {}
    needed: dict[str, float | None] = {"0.005": None, "0.01": None}
    for k in range(len(qids) + 1):  # the k least confident routed
        mixed = float((f[:k].sum() + s[k:].sum()) / len(qids))
        share = k / len(qids)
        for budget in needed:
            if needed[budget] is None and full_mean - mixed <= float(budget):
                needed[budget] = round(share, 3)
        for target in ROUTE_SHARES:
            if k == round(target * len(qids)):
                curve[str(target)] = round(mixed, 4)
    return {"ndcg@10_by_share": curve, "share_for_loss": needed}


def paired(student: dict[str, float], full: dict[str, float], seed: int = 0) -> list[float]:
    """Mean student − full nDCG@10 with a 95 % paired bootstrap interval over queries."""
    diff = np.array([student[q] - full[q] for q in sorted(full)])  # (n,)
    lo, hi = percentile_ci(bootstrap_means(diff, 5_000, np.random.default_rng(seed)))
    return [round(float(diff.mean()), 4), round(lo, 4), round(hi, 4)]


def run_one(overrides: dict[str, Any], corpus: Corpus, setup: dict[str, Any]) -> dict[str, Any]:
    """Train one configuration on one corpus's fit side and score it on its validation carve."""
    config = DistillConfig(**overrides)
    (variant,) = config.variants
    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    fit, val = setup["fit"], setup["val"]
    pairs = distill_pairs(fit, setup["doc_ids"], config, rng)
    teacher_q = setup["teacher"].encode(pairs.texts)  # (P, D)
    negatives = pair_negatives(teacher_q, setup["doc_emb"], pairs, config, rng)
    if variant == "static":
        counts = token_counts(setup["tokenizer"], [*setup["corpus_texts"], *pairs.texts])
        table = setup["raw_table"]
        if config.static_init_vocab == "seen":
            table = np.where((counts > 0)[:, None], table, 0).astype(np.float32)
        student = static_student_of(setup["model_dir"], table, counts, config)
    else:
        student = distilled_student(setup["model_dir"], config)
    info = fit_student(
        student,
        DistillTargets(pairs, setup["doc_emb"], teacher_q, negatives),
        temperature=TEMPERATURE,
        config=config,
        rng=rng,
    )
    student.model.eval()
    emb = np.asarray(
        student.model.encode(setup["val_texts"], batch_size=64, normalize_embeddings=True), dtype=np.float32
    )  # (n, D)
    per_q = per_query_ndcg(emb, setup["doc_emb"], setup["doc_ids"], val)
    full = setup["full_per_q"]
    qids = [q for q in val.queries if val.qrels.get(q)]
    margin = dict(zip(qids, margins(emb, setup["doc_emb"]).tolist(), strict=True))
    mean = round(float(np.mean(list(per_q.values()))), 4)
    return {
        "corpus": corpus.name,
        "overrides": overrides,
        "variant": variant,
        "n_val": len(per_q),
        "val_ndcg@10": mean,
        "val_ndcg@10_full": setup["full_val"],
        "loss": round(setup["full_val"] - mean, 4),
        "vs_full": paired(per_q, full),
        "routing": routing(per_q, full, margin),
        "n_pairs": len(pairs.texts),
        "steps": info["steps"],
        "train_s": info["seconds"],
        "wall_s": round(time.perf_counter() - started, 1),
        "load_before": round(os.getloadavg()[0], 2),
    }


def prepare_corpus(corpus: Corpus, model_dir: Path) -> dict[str, Any] | None:
    """Everything a run needs for one corpus (None, with the reason printed, when its source is missing)."""
    from transformers import AutoTokenizer

    base = corpus_setup(corpus)
    if base is None:
        return None
    train, doc_ids, doc_emb, onnx = base["train"], base["doc_ids"], base["doc_emb"], base["onnx"]
    fit, val = carve_validation(train, VALIDATION_FRACTION, VALIDATION_SEED)
    WORK.mkdir(parents=True, exist_ok=True)
    teacher = TeacherCache(WORK / f"teacher-{corpus.name}.npz", onnx)
    val_texts = [val.queries[q] for q in val.queries if val.qrels.get(q)]
    full_per_q = per_query_ndcg(teacher.encode(val_texts), doc_emb, doc_ids, val)
    return {
        "fit": fit,
        "val": val,
        "doc_ids": doc_ids,
        "doc_emb": doc_emb,
        "teacher": teacher,
        "val_texts": val_texts,
        "full_per_q": full_per_q,
        "full_val": round(float(np.mean(list(full_per_q.values()))), 4),
        "corpus_texts": [document_text(d.title, d.text) for d in fit.corpus.values()],
        "model_dir": model_dir,
        "raw_table": raw_table(model_dir),
        "tokenizer": AutoTokenizer.from_pretrained(str(model_dir)),
    }


def save_row(name: str, row: dict[str, Any]) -> None:
    """Append one row to RESULTS (runs on several corpora may go side by side: a lock file serialises)."""
    import fcntl

    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _append(name, row)


def _append(name: str, row: dict[str, Any]) -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    results["validation"] = {
        "fraction": VALIDATION_FRACTION,
        "seed": VALIDATION_SEED,
        "carve": "whole query groups (training.data.validation_carve)",
        "bundle": "base all-MiniLM-L6-v2, exact search over the corpus (no fine-tuning)",
    }
    results["runs"].append({"name": name, **row})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS, results)


def print_table() -> None:
    """Every candidate (rows) on every corpus (columns): validation loss vs the full model, routing."""
    runs = json.loads(RESULTS.read_text())["runs"]
    corpora = list(dict.fromkeys(r["corpus"] for r in runs))
    names = list(dict.fromkeys(r["name"] for r in runs))
    full = {r["corpus"]: (r["val_ndcg@10_full"], r["n_val"]) for r in runs}
    head = " | ".join(f"{c} (full {full[c][0]:.4f}, {full[c][1]} q)" for c in corpora)
    print(f"| candidate | {head} | worst loss |")
    print("|---|" + "---:|" * (len(corpora) + 1))
    for name in names:
        cells, worst = [], -1.0
        for c in corpora:
            row = next((r for r in runs if r["name"] == name and r["corpus"] == c), None)
            if row is None:
                cells.append("")
                continue
            d, lo, hi = row["vs_full"]
            share = row["routing"]["share_for_loss"]["0.005"]
            cells.append(f"{row['val_ndcg@10']:.4f} ({d:+.4f}, {lo:+.3f}..{hi:+.3f}; route {share})")
            worst = max(worst, row["loss"])
        print(f"| {name} | " + " | ".join(cells) + f" | {worst:.4f} |")
    print(
        "\ncells: validation nDCG@10 (student − full, 95 % paired bootstrap; share of queries routed to the"
    )
    print("full model by smallest top-1/top-2 margin that brings the loss within 0.005)")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = argv
    if not args or args[0] not in ("prepare", "run", "table"):
        raise SystemExit(__doc__)
    if args[0] == "table":
        print_table()
        return
    names = [c.name for c in CORPORA]
    if "--corpora" in args:
        i = args.index("--corpora")
        names = args[i + 1].split(",")
        args = args[:i] + args[i + 2 :]
    model_dir = default_model_path()
    corpora = [c for c in CORPORA if c.name in names]
    if args[0] == "prepare":
        for corpus in corpora:
            setup = prepare_corpus(corpus, model_dir)
            if setup is not None:
                print(
                    f"{corpus.name}: {len(setup['doc_ids'])} documents, full val nDCG@10 {setup['full_val']}"
                )
        return
    if len(args) < 3 or len(args) % 2 == 0:
        raise SystemExit("run NAME CONFIG [NAME CONFIG ...]")
    setups: dict[str, dict[str, Any] | None] = {}  # one setup per corpus for every configuration
    for name, text in zip(args[1::2], args[2::2], strict=True):
        overrides = json.loads(text)
        for corpus in corpora:
            if corpus.name not in setups:
                setups[corpus.name] = prepare_corpus(corpus, model_dir)
            setup = setups[corpus.name]
            if setup is None:
                continue
            row = run_one(overrides, corpus, setup)
            print(json.dumps(row), flush=True)
            save_row(name, row)


if __name__ == "__main__":
    main()
