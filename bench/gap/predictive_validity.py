"""Does the gap report predict how the model does on queries it has not seen? Many seeds, two corpora.

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python -m bench predictive_validity OUT_DIR \
        [--corpora scifact,demo] [--seeds 10] [--tower full|query] [--results bench/results/predictive_validity.json]

Per corpus and seed, the training queries are split, seeded, into three disjoint parts: A (half) to train on,
R (a quarter) given to the trainer as its held-out split — the report's held-out anchors — and U (a
quarter) that neither the training nor the report ever sees. The model is fine-tuned on A with the real
trainer, which writes the gap report on (A, R). The same estimators are then applied, with the same model,
pool, k and τ, to U and to the corpus's test split T. T is a shifted population on scifact (other claims,
document-disjoint from train) and on the demo corpus (other standard-library objects).

Per seed the script records the report's held-out risk R(k) at the training k and the plug-in CE∞ with their
95% CIs, and the same quantities measured on U and T with their own CIs. Over the seeds it prints, for each
quantity and each measured split:

- `in CI`: the fraction of seeds whose measured value falls inside the report's 95% CI — the question as
  asked; but the measured value is itself an estimate, and with equal sizes a second independent estimate
  lands inside the first one's 95% CI only ≈ 83 % of the time even when nothing is biased;
- `in PI`: the fraction inside the 95% prediction interval for a second estimate, value ± 1.96·√(se_R² +
  se_U²) (se from each CI's width) — nominal 95 % when the report is unbiased for that population;
- the mean bias (measured − predicted) over seeds with its t interval, and the mean z.

`--tower query` (results in bench/results/predictive_validity_query.json; give it its own OUT_DIR) validates
the report of a query-side retrain (training/distill/query_retrain.py) the same way. Per corpus, the base model
encodes the pool once into a live bundle (flat index; the embedding cache); per seed, the retrain trains a
query tower on A against that bundle's fixed document vectors with QueryRetrainConfig's defaults (LoRA rank
32, up to 4 epochs at batch 32, 3 negatives per pair mined from the live index, early stopping on the default
20 % validation carve of A, which the report's training anchors then leave out) — the full budget, not a
reduced one — and writes its report on (A, R): k is the mean number of negatives a training row saw (≈ 120,
not batch − 1). U and T are then measured by the same function (training.distill.query_report.
query_gap_report) with the same query tower, fixed vectors, pool and k. Nothing is published: the base
bundle stays live for every seed.

For U the report's population is U's population, so a bias whose interval excludes 0 is a defect of the
estimator; for T it is the distribution shift, which no report on R can see.

Each seed writes OUT_DIR/seeds/<corpus>-<seed>.json (and the embeddings, .npz, for re-analysis) and is skipped
when that file exists, so a crashed run resumes without losing finished seeds, and several workers with
disjoint --corpora/--first-seed ranges can share one OUT_DIR; the summary JSON is rewritten after every seed.
Afterwards, without training again:

- `--rescore` recomputes every seed's risks with the current estimators (same query sample, pool order and
  random stream, so the point values are unchanged) and keeps the percentile intervals of the same
  replicates beside them, for comparison;
- `--decompose` splits the differences between splits into the positive's term and the negatives' term;
- `--interval-check` measures the coverage of the percentile and the studentized interval for the mean of
  the seeds' own per-anchor losses (pooled, centred), at the report's sample sizes.

CPU budget (sized for about 2 hours of one free core for 2 × 10 seeds): a fixed 1,000-document scifact pool
(every relevant document + distractors; the demo corpus is 1,100 documents, all used), one epoch at batch 16,
no mined negatives, no validation carve; the corpus is encoded by the base model once per corpus (the
embedding cache) and by each tuned model once. `--tower query` encodes no document after the live bundle: a
seed took 40–242 s of wall time on one core (demo 89–242 s, scifact 40–167 s, load average 4–6), so 2 × 20
seeds took about an hour.
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
from typing import Any

import numpy as np

from bench.harness.paths import SCIFACT
from contract.bundles.report_schema import Estimate, GapReport, NotComputable
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan, retrain_plan
from training.data.beir import load_beir
from training.data.demo_data import build_demo_dataset
from training.data.query_sample import sample_queries
from training.data.retrieval_data import RetrievalData
from training.eval.embedding_cache import EmbeddingCache
from training.gap import bootstrap
from training.gap import estimators as est
from training.gap.anchors import build_anchors, pool_embeddings
from training.gap.report import CorpusVectors, ReportOptions, compute_report
from training.gap.sections import model_identity
from training.train.phase_timer import PhaseTimer
from training.train.run_hooks import RunHooks
from training.train.trainer import train

T_975 = {n: v for n, v in zip(range(2, 31), [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262,
         2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
         2.064, 2.060, 2.056, 2.052, 2.048, 2.045], strict=True)}  # fmt: skip  # t quantiles, n − 1 df
QUANTITIES = ("risk_test", "ce_inf_plugin")


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


def corpus_source(name: str, out: Path) -> Path:
    """The BEIR folder of a corpus: scifact from the shared data, the demo corpus built once under out/, or
    one of bench/harness/corpora.py's (manpages, debpkgs, pycode: built once from this machine's files)."""
    from bench.harness.corpora import CORPORA, data_dir

    if name == "scifact":
        return SCIFACT
    if name == "demo":
        folder = out / "demo-source"
        if not (folder / "corpus.jsonl").exists():
            build_demo_dataset(folder)
        return folder
    known = {c.name: c for c in CORPORA if c.name not in ("scifact", "pydocs")}  # pydocs is the demo corpus
    if name in known:
        folder = data_dir(known[name])
        if folder is None:
            raise SystemExit(f"--corpora: {name}: its source is missing on this machine (see above)")
        return folder
    raise SystemExit(f"--corpora: unknown corpus {name!r} (scifact, demo, {', '.join(known)})")


def _estimate(e: Estimate | NotComputable) -> dict[str, Any] | None:
    if not isinstance(e, Estimate):
        return None
    return {"value": e.value, "ci_low": e.ci_low, "ci_high": e.ci_high}


def _summary(r: GapReport) -> dict[str, Any]:
    return {
        "n_queries": r.n_test_queries,
        "risk_test": _estimate(r.risk_test),
        "ce_inf_plugin": _estimate(r.ce_inf_plugin),
        "ce_inf_corrected": _estimate(r.ce_inf_corrected),
        "ndcg_at_10": r.retrieval.test.ndcg_at_10 if r.retrieval else None,
    }


def pool_ids(corpus: str, full_train: RetrievalData, full_test: RetrievalData, distractors: int) -> list[str]:
    """The document pool, the same for every seed (pool seed 0), so the base model encodes it once (the
    cache): every relevant document plus `distractors` others on scifact, the whole demo corpus."""
    relevant = {d for data in (full_train, full_test) for rel in data.qrels.values() for d in rel}
    others = sorted(set(full_train.corpus) - relevant)
    n_distractors = min(distractors, len(others)) if corpus == "scifact" else len(others)
    chosen = set(random.Random(0).sample(others, n_distractors))
    return [d for d in full_train.corpus if d in relevant or d in chosen]  # corpus order


def seed_data(
    corpus: str, source: Path, seed: int, out: Path, args: argparse.Namespace
) -> tuple[Path, Path, dict[str, RetrievalData]]:
    """(the seed's work folder, its BEIR folder over the pool with splits a, r, u and test, those parts)."""
    full_train, full_test = load_beir(source, "train"), load_beir(source, "test")
    part_a, part_r, part_u = split_queries(full_train, [0.5, 0.25, 0.25], seed)
    parts = {"a": part_a, "r": part_r, "u": part_u, "test": full_test}
    work = out / "work" / f"{corpus}-{seed}"
    data_dir = write_beir(work / "data", pool_ids(corpus, full_train, full_test, args.distractors), parts)
    return work, data_dir, parts


def save_embeddings(
    out: Path,
    name: str,
    doc_ids: list[str],
    doc_emb: np.ndarray,
    parts: dict[str, RetrievalData],
    encoder: Encoder,
) -> None:
    """The pool's vectors and the held-out splits' query vectors, for --decompose without training again."""
    splits = {"r": parts["r"], "u": parts["u"], "t": parts["test"]}
    arrays: dict[str, np.ndarray] = {"doc_emb": np.asarray(doc_emb, dtype=np.float32)}
    for key, data in splits.items():
        arrays[f"q_{key}"] = encoder.encode(list(data.queries.values()), kind="query", show_progress=False)
    np.savez_compressed(out / "seeds" / f"{name}.npz", **arrays)  # type: ignore[arg-type]
    meta = {
        "doc_ids": list(doc_ids),
        **{f"qids_{k}": list(d.queries) for k, d in splits.items()},
        **{f"qrels_{k}": d.qrels for k, d in splits.items()},
    }
    (out / "seeds" / f"{name}.meta.json").write_text(json.dumps(meta), encoding="utf-8")


def seed_record(
    corpus: str,
    seed: int,
    predicted: GapReport,
    measured: dict[str, GapReport],
    parts: dict[str, RetrievalData],
) -> dict[str, Any]:
    """The fields every seed's record has, whichever tower was trained."""
    return {
        "corpus": corpus,
        "seed": seed,
        "k": predicted.k,
        "temperature": predicted.model.temperature,
        "pool_size": predicted.pool_size,
        "n_queries": {
            k: len(parts[s].queries) for k, s in (("a", "a"), ("r", "r"), ("u", "u"), ("t", "test"))
        },
        "report_r": {
            **_summary(predicted),
            "risk_train": _estimate(predicted.risk_train),
            "gap": _estimate(predicted.gap),
        },  # fmt: skip
        "measured_u": _summary(measured["u"]),
        "measured_t": _summary(measured["test"]),
    }


def run_seed(
    corpus: str, source: Path, seed: int, out: Path, args: argparse.Namespace, cache: EmbeddingCache
) -> dict[str, Any]:
    """Train on A, report on R, measure on U and T: one seed's record."""
    t0 = time.perf_counter()
    work, data_dir, parts = seed_data(corpus, source, seed, out, args)
    config = TrainConfig(
        train_split="a",
        eval_split="r",
        epochs=args.epochs,
        batch_size=args.batch_size,
        hard_negatives=0,
        validation_fraction=0.0,
        seed=seed,
        max_steps=args.max_steps,
    )
    timer = PhaseTimer()
    result = train(
        config, data_dir, work / "run", hooks=RunHooks(show_progress=False, timer=timer, cache=cache)
    )
    predicted = GapReport.model_validate_json((work / "run" / "report" / "report.json").read_text())
    assert result.evaluation is not None
    encoder = Encoder.load(result.model_dir)
    emb_ids, emb = result.evaluation.doc_ids, result.evaluation.doc_embeddings
    a_split = load_beir(data_dir, "a")
    measured = {}
    t_measure = time.perf_counter()
    for name in ("u", "test"):
        measured[name] = compute_report(
            encoder,
            a_split,
            load_beir(data_dir, name),
            ReportOptions(k=predicted.k, seed=seed, n_boot=args.n_boot),
            corpus=CorpusVectors(list(emb_ids), emb),
        )
    t_measure = time.perf_counter() - t_measure
    save_embeddings(out, f"{corpus}-{seed}", list(emb_ids), emb, parts, encoder)
    return {
        **seed_record(corpus, seed, predicted, measured, parts),
        "ndcg_at_10_base": result.base_metrics.get("ndcg@10"),
        "seconds": {
            **{k: round(v, 1) for k, v in timer.seconds.items()},
            "measure": round(t_measure, 1),
            "total": round(time.perf_counter() - t0, 1),
        },  # fmt: skip
    }


def live_bundles(
    corpus: str, source: Path, out: Path, args: argparse.Namespace, cache: EmbeddingCache
) -> Path:
    """--tower query: a bundles folder whose live version is the base model over the pool, built once per
    corpus (its document vectors are the fixed side of every seed's query tower)."""
    from training.bundle.store import BundleStore
    from training.publish.index_model import index_model

    bundles = out / "work" / f"{corpus}-live" / "bundles"
    if BundleStore(bundles).current_version() is None:
        full_train, full_test = load_beir(source, "train"), load_beir(source, "test")
        ids = pool_ids(corpus, full_train, full_test, args.distractors)
        data_dir = write_beir(bundles.parent / "data", ids, {"test": full_test})
        index_model(
            None,
            PublishPlan(
                data=DataPlan(data_dir=str(data_dir)),
                index=IndexPlan(kind="flat"),
                publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False),
            ),
            RunHooks(show_progress=False, cache=cache),
        )
    return bundles


def run_query_seed(
    corpus: str, source: Path, seed: int, out: Path, args: argparse.Namespace, cache: EmbeddingCache
) -> dict[str, Any]:
    """--tower query: a query tower trained on A against the live bundle's fixed document vectors, its report
    on (A, R); the same estimators, query tower and fixed vectors on U and T."""
    from contract.bundles.bundle import load_bundle
    from contract.query_config import QueryRetrainConfig
    from training.bundle.store import BundleStore
    from training.data.validation_carve import carve_validation
    from training.distill.query_report import ReportedRetrain, query_gap_report
    from training.distill.query_retrain import query_side_retrain
    from training.distill.query_tower import fixed_vectors

    t0 = time.perf_counter()
    bundles = live_bundles(corpus, source, out, args, cache)
    work, data_dir, parts = seed_data(corpus, source, seed, out, args)
    train_config = TrainConfig(train_split="a", eval_split="r", seed=seed, max_steps=args.max_steps)
    config = QueryRetrainConfig()  # the project's defaults: LoRA, mined negatives, early stopping
    timer = PhaseTimer()
    publish = PublishPlan(
        data=DataPlan(data_dir=str(data_dir)),
        publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False),
    )
    plan = retrain_plan(train_config, config, publish, "query")
    result = query_side_retrain(plan, work / "run", RunHooks(timer=timer), publish=False)
    predicted = GapReport.model_validate_json((work / "run" / "report" / "report.json").read_text())
    encoder = Encoder.load(work / "run" / "model")  # the tuned query tower + the parent's document tower
    live = load_bundle(BundleStore(bundles).version_path(result.parent), verify=False, mmap=True)
    try:
        fit, _ = carve_validation(
            load_beir(data_dir, "a"), train_config.validation_fraction, seed
        )  # as trained
        t_measure, retrain = time.perf_counter(), ReportedRetrain(live, result.parent, config, train_config)
        measured = {
            name: query_gap_report(encoder, fit, parts[name], predicted.k, retrain) for name in ("u", "test")
        }
        t_measure = time.perf_counter() - t_measure
        doc_emb = fixed_vectors(live.index, range(live.index.ntotal))  # (N, D) the pool: every indexed doc
        save_embeddings(out, f"{corpus}-{seed}", list(live.doc_ids), doc_emb, parts, encoder)
    finally:
        live.docstore.close()
    return {
        **seed_record(corpus, seed, predicted, measured, parts),
        "tower": "query",
        "ndcg_at_10_base": result.base_metrics.get("ndcg@10"),  # the live (base) query encoder on R
        "ndcg_at_10_tuned": result.tuned_metrics.get("ndcg@10"),
        "loop": {
            "steps": result.loop.steps,
            "best_step": result.loop.best_step,
            "stopped_early": result.loop.stopped_early,
        },  # fmt: skip
        "seconds": {
            **{k: round(v, 1) for k, v in timer.seconds.items()},
            "measure": round(t_measure, 1),
            "total": round(time.perf_counter() - t0, 1),
        },  # fmt: skip
    }


def _combined_se(pred: dict[str, float], meas: dict[str, float]) -> float:
    """√(se_pred² + se_meas²), each se = its 95% CI's width / (2·1.96). The studentized intervals are not
    symmetric (they reach further toward the long tail of the losses), but the difference of two estimates
    of the same skewed mean is nearly symmetric, so the full width is the fair measure of each one's spread."""

    def se(e: dict[str, float]) -> float:
        return (e["ci_high"] - e["ci_low"]) / (2 * 1.96)

    return math.hypot(se(pred), se(meas))


def aggregate(records: list[dict[str, Any]], source: str | None = None) -> dict[str, Any]:
    """Per corpus, quantity and measured split: coverage of the report's CI and of the prediction interval,
    mean bias with its t interval over seeds, mean z."""
    out: dict[str, Any] = {}
    for corpus in sorted({r["corpus"] for r in records}):
        mine = [r for r in records if r["corpus"] == corpus]
        entry: dict[str, Any] = {"seeds": sorted(r["seed"] for r in mine)}
        # `source`: another set of intervals of the same estimates ("percentile", written by rescore)
        rows = [r.get(source, r) if source else r for r in mine]
        for q in QUANTITIES:
            for split in ("u", "t"):
                pairs = [
                    (r["report_r"][q], r[f"measured_{split}"][q])
                    for r in rows
                    if r["report_r"][q] and r[f"measured_{split}"][q]
                ]
                if not pairs:
                    continue
                diff = np.array([m["value"] - p["value"] for p, m in pairs])
                comb = np.array([_combined_se(p, m) for p, m in pairs])
                in_ci = sum(p["ci_low"] <= m["value"] <= p["ci_high"] for p, m in pairs)
                in_pi = int(np.sum(np.abs(diff) <= 1.96 * comb))
                n = len(pairs)
                half = T_975.get(n, 1.96) * diff.std(ddof=1) / math.sqrt(n) if n > 1 else float("nan")
                entry[f"{q}:{split}"] = {
                    "n_seeds": n,
                    "in_ci": in_ci,
                    "in_pi": in_pi,
                    "bias": float(diff.mean()),
                    "bias_ci": [float(diff.mean() - half), float(diff.mean() + half)],
                    "mean_z": float((diff / comb).mean()),
                    "sd_of_differences": float(diff.std(ddof=1)) if n > 1 else None,
                    "mean_combined_se": float(comb.mean()),
                }
        out[corpus] = entry
    return out


def _fmt(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.4f}"


def print_table(summary: dict[str, Any]) -> None:
    print(
        "\n| corpus | quantity | measured on | seeds | in report CI | in 95% PI | mean bias (measured − report) "
        "[95% t CI] | mean z | sd of differences | mean combined se |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for corpus, entry in summary.items():
        for key, s in entry.items():
            if key == "seeds":
                continue
            q, split = key.split(":")
            print(
                f"| {corpus} | {q} | {'U (same population)' if split == 'u' else 'T (test split)'} | "
                f"{s['n_seeds']} | {s['in_ci']}/{s['n_seeds']} | {s['in_pi']}/{s['n_seeds']} | "
                f"{s['bias']:+.4f} [{_fmt(s['bias_ci'][0])}, {_fmt(s['bias_ci'][1])}] | {s['mean_z']:+.2f} | "
                f"{_fmt(s['sd_of_differences'])} | {s['mean_combined_se']:.4f} |"
            )


def rescored_section(
    work: Path,
    name: str,
    seed: int,
    encoder: Any,
    a_sample: Any,
    q_a: np.ndarray,
    saved: tuple,
    k: int,
    n_boot: int,
) -> Any:
    """Section (a) of one held-out split (r, u or test) recomputed from the saved model and embeddings."""
    meta, emb = saved
    identity = model_identity(encoder)
    held_out = sample_queries(load_beir(work / "data", name), None, seed)
    corpus = {**a_sample.corpus, **held_out.corpus}
    column = {d: i for i, d in enumerate(corpus)}
    doc_emb = pool_embeddings(encoder, corpus, meta["doc_ids"], emb)  # (N, dim), report order
    q_x = encoder.encode(list(held_out.queries.values()), kind="query", show_progress=False)
    # gap_at_k_section's own steps, so that the percentile interval of the same replicates is at hand
    rng = np.random.default_rng(seed)  # compute_report's stream: section (a) draws first
    a_train = build_anchors(encoder.similarity, list(a_sample.queries), a_sample.qrels, q_a, doc_emb, column)
    a_test = build_anchors(encoder.similarity, list(held_out.queries), held_out.qrels, q_x, doc_emb, column)
    tau = identity.temperature
    l_train = est.risk_with_random_negatives(a_train.sim, a_train.pos, a_train.exclude, k, tau, rng)
    l_test = est.risk_with_random_negatives(a_test.sim, a_test.pos, a_test.exclude, k, tau, rng)
    return bootstrap.gap_with_ci(
        l_train,
        l_test,
        n_boot=n_boot,
        rng=rng,
        groups_train=a_train.groups,
        groups_test=a_test.groups,
    )


def apply_sections(record: dict[str, Any], sections: dict[str, Any]) -> None:
    """The recomputed risks and gap into the seed's record, the percentile intervals beside them."""
    keys = (("report_r", "r"), ("measured_u", "u"), ("measured_t", "test"))
    percentile: dict[str, Any] = {}
    for key, name in keys:
        g = sections[name]
        lo, hi = bootstrap.percentile_ci(g.test_boot)
        record[key] = {
            **record[key],
            "risk_test": {"value": g.test, "ci_low": g.test_ci[0], "ci_high": g.test_ci[1]},
        }
        percentile[key] = {**record[key], "risk_test": {"value": g.test, "ci_low": lo, "ci_high": hi}}
    g = sections["r"]
    record["report_r"]["risk_train"] = {
        "value": g.train,
        "ci_low": g.train_ci[0],
        "ci_high": g.train_ci[1],
    }
    record["report_r"]["gap"] = {"value": g.gap, "ci_low": g.gap_ci[0], "ci_high": g.gap_ci[1]}
    record["percentile"] = percentile


def rescore(out: Path, corpora: list[str], n_boot: int) -> None:
    """Recompute every finished seed's section (a) — R_train, R_test and the gap — with the current
    estimators (studentized intervals), on R (the report) and on U and T (the measurements), from its saved
    model and corpus embeddings, exactly as compute_report builds it (same query sample, pool order and
    random stream: the point values are those first computed; the plug-in CE∞ is unchanged code and kept).
    `percentile` keeps the percentile intervals of the same bootstrap replicates, for comparison."""
    for path in sorted((out / "seeds").glob("*.json")):
        if path.name.endswith(".meta.json") or path.name.split("-")[0] not in corpora:
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        if "percentile" in record:
            continue  # already rescored
        work = out / "work" / path.stem
        meta = json.loads(path.with_name(f"{path.stem}.meta.json").read_text(encoding="utf-8"))
        emb = np.load(path.with_name(f"{path.stem}.npz"))["doc_emb"]
        encoder = Encoder.load(work / "run" / "model")
        seed = int(record["seed"])
        a_sample = sample_queries(load_beir(work / "data", "a"), 300, seed)
        q_a = encoder.encode(list(a_sample.queries.values()), kind="query", show_progress=False)
        sections = {}
        for name in ("r", "u", "test"):
            sections[name] = rescored_section(
                work, name, seed, encoder, a_sample, q_a, (meta, emb), record["k"], n_boot
            )
        apply_sections(record, sections)
        tmp = path.with_suffix(".tmp")  # atomic: a running worker aggregates these files after every seed
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        tmp.replace(path)
        print(f"rescored {path.stem}", flush=True)


def split_terms(
    q_emb: np.ndarray,  # (n_queries, dim)
    doc_emb: np.ndarray,  # (N, dim)
    meta: dict[str, Any],
    split: str,
    column: dict[str, int],
    k_tau: tuple[int, float],
    seed: int,
    replicates: int,
) -> dict[str, float]:
    """One split's mean held-out risk and its positive and negatives terms (the report's sampler)."""
    from training.gap.estimators import infonce_risk, pad_exclusions, sample_negatives

    k_seed, tau = k_tau
    anchor_rows, cols, excl = [], [], []
    for qi, qid in enumerate(meta[f"qids_{split}"]):
        relevant = [column[d] for d in meta[f"qrels_{split}"].get(qid, {}) if d in column]
        for c in relevant:
            anchor_rows.append(qi)
            cols.append(c)
            excl.append(relevant)
    sim = (q_emb @ doc_emb.T).astype(np.float64)[anchor_rows]  # (n_anchors, N)
    pos = sim[np.arange(len(cols)), cols]  # (n_anchors,)
    exclude = pad_exclusions(excl, doc_emb.shape[0])
    rng = np.random.default_rng(seed)
    loss = np.mean(  # averaged over draws of the negatives: only the anchors' own variation is left
        [
            infonce_risk(
                pos,
                np.take_along_axis(sim, sample_negatives(sim.shape[1], k_seed, exclude, rng), axis=1),
                tau,
            )
            for _ in range(replicates)
        ],
        axis=0,
    )  # (n_anchors,)
    return {
        "risk": loss.mean(),
        "positive": (-pos / tau).mean(),
        "negatives": (loss + pos / tau).mean(),
    }


def decompose(out: Path, corpora: list[str], k: int, seed: int = 0, replicates: int = 20) -> dict[str, Any]:
    """Which term of the held-out risk differs between R and U (or T), from each seed's saved embeddings.

    l = log(1 + Σ_j e^{(s_j − s⁺)/τ}) − log k splits into the positive's term −s⁺/τ and the negatives' term
    log(e^{s⁺/τ} + Σ_j e^{s_j/τ}) − log k; each split's mean of each term is taken with the report's own
    sampler (k random pool negatives, the query's relevant documents excluded; averaged over `replicates`
    draws of the negatives), and the differences
    measured − report are averaged over seeds with t intervals.
    """
    rows: dict[str, dict[str, list[float]]] = {}
    for meta_path in sorted((out / "seeds").glob("*.meta.json")):
        corpus = meta_path.name.split("-")[0]
        if corpus not in corpora:
            continue
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        record = json.loads(meta_path.with_name(meta_path.name.replace(".meta.json", ".json")).read_text())
        tau = float(record["temperature"])
        k_seed = int(record.get("k", k))  # the report's own k (the query tower's is not batch − 1)
        arrays = np.load(meta_path.with_name(meta_path.name.replace(".meta.json", ".npz")))
        doc_emb = arrays["doc_emb"]  # (N, dim)
        column = {d: i for i, d in enumerate(meta["doc_ids"])}
        terms = {}
        for split in ("r", "u", "t"):
            terms[split] = split_terms(
                arrays[f"q_{split}"], doc_emb, meta, split, column, (k_seed, tau), seed, replicates
            )
        for split in ("u", "t"):
            for term in ("risk", "positive", "negatives"):
                rows.setdefault(f"{corpus}:{split}:{term}", {"d": []})["d"].append(
                    float(terms[split][term] - terms["r"][term])
                )
    result = {}
    print("\n| corpus | measured on | term | seeds | mean difference (measured − report split) [95% t CI] |")
    print("|---|---|---|---|---|")
    for key, v in rows.items():
        corpus, split, term = key.split(":")
        d = np.asarray(v["d"])
        half = T_975.get(len(d), 1.96) * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        result[key] = {
            "n_seeds": len(d),
            "mean": float(d.mean()),
            "ci": [float(d.mean() - half), float(d.mean() + half)],
        }
        print(
            f"| {corpus} | {'U' if split == 'u' else 'T'} | {term} | {len(d)} | {d.mean():+.4f} "
            f"[{_fmt(d.mean() - half)}, {_fmt(d.mean() + half)}] |"
        )
    return result


def _split_losses(out: Path, name: str, k: int) -> list[np.ndarray]:
    """Per-anchor held-out losses (one draw of k random pool negatives) of R, U and T for one seed."""
    from training.gap.estimators import infonce_risk, pad_exclusions, sample_negatives

    meta = json.loads((out / "seeds" / f"{name}.meta.json").read_text(encoding="utf-8"))
    record = json.loads((out / "seeds" / f"{name}.json").read_text())
    tau, k = float(record["temperature"]), int(record.get("k", k))  # the seed's own k, as in decompose
    arrays = np.load(out / "seeds" / f"{name}.npz")
    column = {d: i for i, d in enumerate(meta["doc_ids"])}
    losses = []
    for split in ("r", "u", "t"):
        rows, cols, excl = [], [], []
        for qi, qid in enumerate(meta[f"qids_{split}"]):
            relevant = [column[d] for d in meta[f"qrels_{split}"].get(qid, {}) if d in column]
            for c in relevant:
                rows.append(qi)
                cols.append(c)
                excl.append(relevant)
        sim = (arrays[f"q_{split}"] @ arrays["doc_emb"].T).astype(np.float64)[rows]  # (n_anchors, N)
        exclude = pad_exclusions(excl, sim.shape[1])
        neg = np.take_along_axis(
            sim, sample_negatives(sim.shape[1], k, exclude, np.random.default_rng(0)), axis=1
        )
        losses.append(infonce_risk(sim[np.arange(len(cols)), cols], neg, tau))
    return losses


def interval_check(out: Path, corpora: list[str], k: int, reps: int = 1000, n_boot: int = 2000) -> None:
    """Coverage of the percentile and the studentized interval for the mean of the real per-anchor losses:
    every seed's R, U and T losses, each centred on its own mean, pooled into a population whose mean is 0;
    samples of the report's sizes are drawn from it and both intervals built from the same replicates."""
    from training.gap.bootstrap import bootstrap_means_and_ses, mean_se, percentile_ci, studentized_ci

    print(
        "\n| corpus | population skewness | n | percentile covers | mean above it | studentized covers | mean above it |"
    )
    print("|---|---|---|---|---|---|---|")
    for corpus in corpora:
        names = sorted(p.name[: -len(".meta.json")] for p in (out / "seeds").glob(f"{corpus}-*.meta.json"))
        pop = np.concatenate([x - x.mean() for name in names for x in _split_losses(out, name, k)])
        skew = float((pop**3).mean() / pop.std() ** 3)
        for n in (135, 200):
            rng = np.random.default_rng(1)
            p_cov = p_high = t_cov = t_high = 0
            for _ in range(reps):
                x = rng.choice(pop, n, replace=True)
                means, ses = bootstrap_means_and_ses(x, n_boot, rng)
                lo, hi = percentile_ci(means)
                p_cov += lo <= 0 <= hi
                p_high += hi < 0
                lo, hi = studentized_ci(float(x.mean()), mean_se(x), means, ses)
                t_cov += lo <= 0 <= hi
                t_high += hi < 0
            print(
                f"| {corpus} | {skew:.1f} | {n} | {p_cov / reps:.3f} | {p_high / reps:.3f} | {t_cov / reps:.3f} | "
                f"{t_high / reps:.3f} |",
                flush=True,
            )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="work folder (runs, per-seed records, embeddings)")
    parser.add_argument("--corpora", default="scifact,demo")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 … n−1 per corpus")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--distractors", type=int, default=340, help="scifact: non-relevant documents in the pool"
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--max-steps", type=int, default=None, help="cap the optimiser steps (smoke runs)")
    parser.add_argument(
        "--tower",
        choices=("full", "query"),
        default="full",
        help="full: the trainer fine-tunes the whole model; query: the query-side retrain (a query tower "
        "against the base model's fixed document vectors)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="default bench/results/predictive_validity.json (--tower query: predictive_validity_query.json)",
    )
    parser.add_argument("--summarize", action="store_true", help="only aggregate the finished seeds")
    parser.add_argument(
        "--rescore", action="store_true", help="recompute the finished seeds' estimates with the current code"
    )
    parser.add_argument(
        "--interval-check",
        action="store_true",
        help="coverage of percentile vs studentized intervals on the real losses",
    )
    parser.add_argument(
        "--decompose", action="store_true", help="only split the finished seeds' risk differences into terms"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.results is None:
        suffix = "" if args.tower == "full" else f"_{args.tower}"
        args.results = Path(f"bench/results/predictive_validity{suffix}.json")
    logging.basicConfig(level=logging.WARNING)
    (args.out / "seeds").mkdir(parents=True, exist_ok=True)
    cache = EmbeddingCache(args.out / "cache")
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.rescore:
        rescore(args.out, corpora, args.n_boot)
        _write_results(args, corpora, show=True)
        return
    if args.interval_check:
        interval_check(args.out, corpora, k=args.batch_size - 1)
        return
    if args.decompose:
        decompose(args.out, corpora, k=args.batch_size - 1)
        return
    if not args.summarize:
        # seed-major order: an interrupted run still has both corpora at the same number of seeds
        for seed in seeds:
            for corpus in corpora:
                path = args.out / "seeds" / f"{corpus}-{seed}.json"
                if path.exists():
                    continue
                run = run_query_seed if args.tower == "query" else run_seed
                record = run(corpus, corpus_source(corpus, args.out), seed, args.out, args, cache)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
                tmp.replace(path)
                print(f"{corpus} seed {seed}: {record['seconds']['total']:.0f} s; report R(k) "
                      f"{record['report_r']['risk_test']}; U {record['measured_u']['risk_test']['value']:.4f}; "
                      f"T {record['measured_t']['risk_test']['value']:.4f}", flush=True)  # fmt: skip
                _write_results(args, corpora)
    _write_results(args, corpora, show=True)


def _write_results(args: argparse.Namespace, corpora: list[str], show: bool = False) -> None:
    records = [
        json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((args.out / "seeds").glob("*.json"))
        if not p.name.endswith(".meta.json") and p.name.split("-")[0] in corpora
    ]
    mixed = [r["seed"] for r in records if r.get("tower", "full") != args.tower]
    if mixed:
        raise SystemExit(
            f"{args.out}: seeds {mixed} were not run with --tower {args.tower}: use another OUT_DIR"
        )
    summary = aggregate(records)
    percentile = aggregate(records, "percentile") if any("percentile" in r for r in records) else None
    protocol = {
        "split": "train queries → A 50 % (trained on) / R 25 % (the report's held-out split) / U 25 % (never "
        "seen); T = the corpus's test split",
        **(
            {
                "epochs": args.epochs,
                "batch_size": args.batch_size,
                "hard_negatives": 0,
                "validation_fraction": 0.0,
            }
            if args.tower == "full"
            else {
                "tower": "query: training.distill.query_retrain with QueryRetrainConfig's defaults (LoRA r 32, "
                "4 epochs at batch 32, 3 negatives mined from the live index, early stopping on a 20 % "
                "validation carve of A) against the base model's fixed document vectors (the live bundle)",
                "max_steps": args.max_steps,
            }
        ),
        "scifact_pool": f"every relevant document of train and test + {args.distractors} distractors (seed 0)",
        "demo_pool": "the whole demo corpus (1,100 documents)",
        "n_boot": args.n_boot,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.results.with_suffix(".tmp")
    doc = {
        "protocol": protocol,
        "summary": summary,
        "summary_percentile_intervals": percentile,
        "seeds": records,
    }
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.results)
    if show:
        print_table(summary)
        if percentile:
            print("\nthe same with percentile intervals (the report's before this change):")
            print_table(percentile)


if __name__ == "__main__":
    main()
