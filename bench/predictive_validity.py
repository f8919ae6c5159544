"""Does the gap report predict how the model does on queries it has not seen? A check on scifact.

    flock /tmp/infonce-heavy.lock .venv/bin/python bench/predictive_validity.py OUT_DIR [--distractors 340]

The training queries (qrels/train.tsv) are split, seeded, into three disjoint parts: A (half) to train on,
R (a quarter) given to the trainer as its held-out split — the report's held-out anchors — and U (a
quarter) that neither the training nor the report ever sees. The model is fine-tuned on A with the real
trainer (a short run), which writes the gap report on (A, R). The same estimators are then applied, with the
same model, pool, k and τ, to U and to the test split T (qrels/test.tsv: other claims, document-disjoint
from train). For each predicted quantity — the held-out risk R(k) at the training k, the plug-in CE∞, and
nDCG@10 — the script prints the report's value and 95% CI, the values measured on U and T with their own
CIs, and whether each measured value falls inside the report's CI.

Reading it: U is drawn from the same query distribution as R, so its value should fall inside R's interval
— but U's estimate is noisy too: with equal sizes the difference of two independent estimates has √2 times
the spread of one, so a measured value lands inside the other's 95% CI only ≈ 83% of the time even when all
is right; the z column (difference over the combined standard error) is the fairer test. T is a shifted
distribution (document-disjoint claims), so a miss there is a real limit of what the report promises.

To fit a 2-core machine (the corpus encoding dominates: about 5 documents/s under load), the corpus is a
slice: every relevant document of the train and test splits plus --distractors random others, the same
pool for every estimate.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import time
from dataclasses import replace
from pathlib import Path

from contract.bundles.report_schema import Estimate, GapReport
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from training.data.beir import load_beir
from training.data.retrieval_data import RetrievalData
from training.gap.report import compute_report
from training.train.trainer import train

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"


def split_queries(data: RetrievalData, fractions: list[float], seed: int) -> list[RetrievalData]:
    """Disjoint seeded parts of data's queries (with their qrels), in the given proportions."""
    ids = sorted(data.queries)
    random.Random(seed).shuffle(ids)
    cuts = [0, *(round(sum(fractions[: i + 1]) * len(ids)) for i in range(len(fractions)))]
    parts = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        keep = set(ids[lo:hi])
        parts.append(
            replace(
                data,
                queries={q: t for q, t in data.queries.items() if q in keep},
                qrels={q: r for q, r in data.qrels.items() if q in keep},
            )
        )
    return parts


def write_beir(folder: Path, corpus_ids: list[str], splits: dict[str, RetrievalData]) -> Path:
    """A BEIR folder over the corpus slice, one qrels/<name>.tsv per part."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    any_split = next(iter(splits.values()))
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for did in corpus_ids:
            doc = any_split.corpus[did]
            f.write(json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for data in splits.values():
            for qid, text in data.queries.items():
                f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    for name, data in splits.items():
        lines = ["query-id\tcorpus-id\tscore"]
        lines += [f"{q}\t{d}\t{s}" for q, rel in data.qrels.items() for d, s in rel.items()]
        (folder / "qrels" / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _se(e: Estimate) -> float:
    return (e.ci_high - e.ci_low) / (2 * 1.96)


def _row(name: str, pred: Estimate, measured: dict[str, Estimate]) -> str:
    cells = [f"{pred.value:.4f} [{pred.ci_low:.4f}, {pred.ci_high:.4f}]"]
    for m in measured.values():
        inside = "yes" if pred.ci_low <= m.value <= pred.ci_high else "**no**"
        z = (m.value - pred.value) / math.sqrt(_se(pred) ** 2 + _se(m) ** 2)
        cells.append(f"{m.value:.4f} [{m.ci_low:.4f}, {m.ci_high:.4f}] | {inside} | {z:+.2f}")
    return f"| {name} | " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--distractors", type=int, default=340, help="random non-relevant documents (+ 660 relevant = 1,000)"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument(
        "--limit", type=int, default=None, help="at most this many queries per part (smoke runs)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()

    full_train, full_test = load_beir(SCIFACT, "train"), load_beir(SCIFACT, "test")
    part_a, part_r, part_u = split_queries(full_train, [0.5, 0.25, 0.25], args.seed)
    if args.limit is not None:
        part_a, part_r, part_u, full_test = (
            split_queries(p, [min(1.0, args.limit / len(p.queries))], args.seed)[0]
            for p in (part_a, part_r, part_u, full_test)
        )
    relevant = {d for data in (part_a, part_r, part_u, full_test) for rel in data.qrels.values() for d in rel}
    others = sorted(set(full_train.corpus) - relevant)
    distractors = set(random.Random(args.seed).sample(others, min(args.distractors, len(others))))
    corpus_ids = [d for d in full_train.corpus if d in relevant or d in distractors]  # corpus order
    data_dir = write_beir(
        args.out / "data", corpus_ids, {"a": part_a, "r": part_r, "u": part_u, "test": full_test}
    )
    config = TrainConfig(
        train_split="a",
        eval_split="r",
        epochs=args.epochs,
        batch_size=args.batch_size,
        hard_negatives=0,
        seed=args.seed,
    )
    result = train(config, data_dir, args.out / "run", show_progress=False)
    t_train = time.perf_counter() - t0
    predicted = GapReport.model_validate_json((args.out / "run" / "report" / "report.json").read_text())
    assert result.evaluation is not None
    encoder = Encoder.load(result.model_dir)
    emb_ids, emb = result.evaluation.doc_ids, result.evaluation.doc_embeddings
    a_split = load_beir(data_dir, "a")
    measured = {
        name: compute_report(
            encoder,
            a_split,
            load_beir(data_dir, name),
            k=predicted.k,
            seed=args.seed,
            doc_ids=emb_ids,
            doc_embeddings=emb,
            n_boot=args.n_boot,
            k_max=8,  # only R(k) at the training k, CE∞ and nDCG are compared
        )
        for name in ("u", "test")
    }

    print(
        f"scifact, pool {predicted.pool_size} documents (all relevant + {len(distractors)} distractors); trained "
        f"on A = {len(part_a.queries)} train queries ({args.epochs} epochs, batch {args.batch_size}, "
        f"{result.train_seconds:.0f} s), k = {predicted.k}, τ = {predicted.model.temperature:g}"
    )
    print(
        f"report on R = {predicted.n_test_queries} held-out train queries; U = {len(part_u.queries)} untouched "
        f"train queries; T = {len(full_test.queries)} test queries\n"
    )
    print(
        "| quantity | report (R) [95% CI] | U [CI] | U inside | z(U) | T [CI] | T inside | z(T) |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    print(
        _row(
            f"held-out risk R(k={predicted.k})",
            predicted.risk_test,
            {n: r.risk_test for n, r in measured.items()},
        )
    )
    print(_row("CE∞ plug-in", predicted.ce_inf_plugin, {n: r.ce_inf_plugin for n, r in measured.items()}))
    ndcg = {
        name: r.retrieval.test.ndcg_at_10 for name, r in {"R": predicted, **measured}.items() if r.retrieval
    }
    print("\nnDCG@10 (point values): " + ", ".join(f"{n} {v:.4f}" for n, v in ndcg.items()))
    print(
        f"\ntraining risk on A {predicted.risk_train.value:.4f}; gap reported {predicted.gap.value:.4f} "
        f"[{predicted.gap.ci_low:.4f}, {predicted.gap.ci_high:.4f}]; tuned nDCG@10 on R "
        f"{result.tuned_metrics['ndcg@10']:.4f} (base {result.base_metrics['ndcg@10']:.4f})"
    )
    print(f"\n(total {time.perf_counter() - t0:.0f} s, of which train() {t_train:.0f} s)")


if __name__ == "__main__":
    main()
