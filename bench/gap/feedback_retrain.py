"""Does a retrain with `feedback: include` raise nDCG@10 on held-out shifted queries? Against a control.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python -m bench feedback_retrain OUT_DIR \
        [--corpora demo,scifact] [--seeds 3 | --seeds demo=3,scifact=1] [--users 80] \
        [--results bench/results/feedback_retrain.json]

Issue 41, item 4 (b)'s retrain half; the verdict half is bench/gap/live_feedback.py, whose corpus folders
(OUT_DIR/<corpus>/data and bundles: the A / R / U split of the training queries, seed 0, and the one bundle
built from A by the real pipeline with the demo's recipe) this bench shares: point both at one OUT_DIR and
the bundle is built once. U is split once more (seed 0) into two halves, each rewritten to the `keywords`
style (its three rarest words: the shift of query style the model was not trained for):

- J, the judged half: per seed, `--users` of its queries (a seeded sample) search the live bundle through
  the real app and send their judgments (relevant: the qrels documents; not relevant: the hits shown above
  them), exactly as in live_feedback, which also gives the live verdict on them before any retrain;
- H, the held-out half: never searched, judged or trained on. Its nDCG@10 (dense, exact search over the
  bundle's documents) is the measure of the shift learned: the same queries for the live bundle and for
  every arm and seed, so before / after and include / exclude are paired on them. The retrain's own held-out
  feedback slice (a seeded 20 % of J's judged queries, what the gate compares) is recorded too, but it is a
  handful of queries (16 of 80), drawn from J and different per seed: too few to measure a gain on.

Per seed, two copies of the published bundles folder (with the judgment store) each get one real retrain,
`python -m training pipeline --feedback include|exclude --retrain-scope full --seed SEED` with the bundle's
own recipe (one epoch on A, evaluation and gate on R, 64 tokens, no ONNX, no distillation): `include` trains
on A plus the judged pairs (with their shown-above hard negatives), `exclude` on A alone (the control: the
same recipe and seed, the judgments in the store but unread). Each arm's candidate (published or kept) is
then measured on H (keyword style), on H as originally written (the population of the training queries) and
on the corpus's test split, beside the live bundle on the same sets, and the gate's decision is recorded.
`--retrain-scope full` for both arms: a job's `auto` would take the query side for `exclude` (the live
documents were encoded by a fine-tuned model) and the arms would then differ in recipe, not only in data.

Each seed's arms go to OUT_DIR/<corpus>/retrain/seed-<n>.json (retrain-jargon/ for `--shift jargon`), written
after each arm; an arm already there is skipped (a crashed run resumes; a second invocation with more corpora,
seeds or `--arms` reuses the finished ones); the arms' bundle copies are deleted once measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.gap.live_feedback import (
    PIPELINE_OPTS,
    add_corpus_options,
    build_bundle,
    jargon_queries,
    keyword_queries,
    run_seed,
)
from bench.gap.predictive_validity import corpus_source, pool_ids, split_queries, write_beir
from contract.atomic import write_json_atomic
from contract.bundles.folder import BundleFolder
from training.data.beir import load_beir
from training.data.retrieval_data import RetrievalData

logger = logging.getLogger(__name__)
SHIFTS = ("keywords", "jargon")  # bench/gap/live_feedback.py's keyword_queries, jargon_queries
SETS = ("shifted", "original", "test")  # H in keyword style, H as written, the test split


@dataclass(frozen=True)
class Arm:
    """One retrain recipe: which judgments it reads, where it starts, and its own options."""

    feedback: str  # include | only | exclude
    from_live: bool = False  # start from the live bundle's model instead of the base model
    options: tuple[str, ...] = ()  # after PIPELINE_OPTS, so they override it


# `*-live` arms fine-tune the model already serving (the shift is learned on top of what it knows) rather
# than the base model again, where 64 judged pairs are diluted among the dataset's 400 in one epoch.
ARMS = {
    "include": Arm("include"),
    "exclude": Arm("exclude"),
    "include-live": Arm("include", from_live=True),
    "exclude-live": Arm("exclude", from_live=True),
    "only-live": Arm("only", from_live=True, options=("--epochs", "4")),
}
CONTROLS = {"include": "exclude", "include-live": "exclude-live"}  # paired on the same seed and queries


def seeds_per_corpus(text: str, corpora: list[str]) -> dict[str, int]:
    """`3` (every corpus) or `demo=3,scifact=1`."""
    if "=" not in text:
        return dict.fromkeys(corpora, int(text))
    given = {name: int(n) for name, n in (part.split("=") for part in text.split(","))}
    return {c: given.get(c, 0) for c in corpora}


def measure(model_dir: Path, sets: dict[str, RetrievalData], cache_dir: Path) -> dict[str, float]:
    """nDCG@10 of one model on each set, by exact dense search; the corpus is encoded once (same pool)."""
    from contract.encoding.encoder import Encoder
    from training.eval.embedding_cache import EmbeddingCache
    from training.eval.evaluate import evaluate

    encoder = Encoder.load(model_dir)
    out: dict[str, float] = {}
    docs = None
    for name, data in sets.items():
        result = evaluate(
            encoder, data, doc_embeddings=docs, show_progress=False, cache=EmbeddingCache(cache_dir)
        )
        docs = result.doc_embeddings
        out[name] = result.metrics["ndcg@10"]
    return out


def retrain(name: str, seed: int, bundles: Path, data_dir: Path, work: Path) -> dict[str, Any]:
    """One real retrain (the CLI's pipeline, as a user or the job runs it) on a copy of the bundles folder."""
    arm = ARMS[name]
    folder = work / "retrain" / f"seed-{seed}" / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(bundles, folder / "bundles")
    command = [sys.executable, "-m", "training", "pipeline", "--data", str(data_dir)]
    command += ["--bundles", str(folder / "bundles"), "--work-dir", str(work / "runs")]
    command += ["--train-split", "a", "--eval-split", "r", "--retrain-scope", "full"]
    command += ["--feedback", arm.feedback, "--start-from", "live" if arm.from_live else "base"]
    command += ["--seed", str(seed), "--json", *PIPELINE_OPTS, *arm.options]
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout)
    result["wall_s"] = time.perf_counter() - started
    result["folder"] = str(folder)
    return result


def run_seed_arms(
    work: Path,
    data_dir: Path,
    sets: dict[str, RetrievalData],
    judged: RetrievalData,
    users: int,
    seed: int,
    arms: list[str],
    record: Path,
    row: dict[str, Any] | None,
) -> dict[str, Any]:
    """Judgments from `users` of the judged half, then each arm not yet in `row` (what `record` holds)
    retrained, measured and written to `record` (a crash loses at most the arm it was in)."""
    bundles = work / "bundles"
    pool = set(sets["test"].corpus)
    verdict = run_seed(bundles, judged, users, seed, pool)  # leaves the judgment store in `bundles`
    print(f"  seed {seed}: {verdict['n_judgments']} judgments, live verdict {verdict['verdict']}", flush=True)
    row = row or {"seed": seed, "users": users, "live_verdict": verdict}
    for arm in (a for a in arms if a not in row):
        result = retrain(arm, seed, bundles, data_dir, work)
        version = result["publish"]["version"]
        folder = Path(result.pop("folder"))
        ndcg = measure(folder / "bundles" / version / "model", sets, work / "runs" / "embeddings")
        shutil.rmtree(folder)
        row[arm] = {
            "ndcg@10": ndcg,
            "gate_eval_ndcg@10": result["tuned"].get("ndcg@10"),  # on R, what the gate compares
            "published": result["publish"]["live"],
            "gate_reason": result["publish"]["reason"],
            "feedback": result["feedback"],
            "wall_s": result["wall_s"],
        }
        print(f"  seed {seed} {arm}: {_fmt(ndcg)}; published {result['publish']['live']} "
              f"({result['wall_s']:.0f} s)", flush=True)  # fmt: skip
        write_json_atomic(record, row, indent=1)  # never a half record that a rerun would trust
    return row


def corpus_sets(corpus: str, out: Path, distractors: int, shift: str) -> tuple[Path, Path, dict[str, Any]]:
    """(the corpus's work folder, its BEIR folder, {sets to measure, judged half}) as live_feedback lays
    them out."""
    source = corpus_source(corpus, out)
    full_train, full_test = load_beir(source, "train"), load_beir(source, "test")
    part_a, part_r, part_u = split_queries(full_train, [0.5, 0.25, 0.25], 0)
    judged, held = split_queries(part_u, [0.5, 0.5], 0)
    work = out / corpus
    ids = pool_ids(corpus, full_train, full_test, distractors)
    data_dir = work / "data"
    if not (data_dir / "corpus.jsonl").exists():
        write_beir(data_dir, ids, {"a": part_a, "r": part_r, "test": full_test})
    pool = {d: full_train.corpus[d] for d in ids}
    if shift == "jargon":  # one renaming for both halves, from the whole of U's vocabulary
        judged_shifted, held_shifted = jargon_queries(judged, part_u), jargon_queries(held, part_u)
    else:
        judged_shifted, held_shifted = keyword_queries(judged), keyword_queries(held)
    sets = {
        "shifted": replace(held_shifted, corpus=pool),
        "original": replace(held, corpus=pool),
        "test": replace(full_test, corpus=pool),
    }
    print(f"{corpus}: A {len(part_a.queries)}, R {len(part_r.queries)}, judged half {len(judged.queries)}, "
          f"held-out half {len(held.queries)}, pool {len(ids)} documents", flush=True)  # fmt: skip
    print(f"  shift {shift}: judged {len(judged_shifted.queries)}, held out {len(held_shifted.queries)} queries",
          flush=True)  # fmt: skip
    return work, data_dir, {"sets": sets, "judged": judged_shifted}


def _fmt(ndcg: dict[str, float]) -> str:
    return ", ".join(f"{name} {ndcg[name]:.3f}" for name in SETS)


def summarise(live: dict[str, float], rows: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Per arm, the mean change from the live bundle on each set; each arm minus its control per seed
    (paired), and each arm minus the live model on shifted H per seed."""
    out: dict[str, Any] = {"seeds": len(rows), "live": live, "arms": arms}
    for arm in arms:
        out[arm] = {
            "delta_mean": {s: statistics.fmean(r[arm]["ndcg@10"][s] - live[s] for r in rows) for s in SETS},
            "published": sum(bool(r[arm]["published"]) for r in rows),
            "minus_live_shifted": _spread([r[arm]["ndcg@10"]["shifted"] - live["shifted"] for r in rows]),
        }
    for arm, control in CONTROLS.items():
        if arm in arms and control in arms:
            diffs = [r[arm]["ndcg@10"]["shifted"] - r[control]["ndcg@10"]["shifted"] for r in rows]
            out[f"{arm}_minus_{control}_shifted"] = _spread(diffs)
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "sd": statistics.stdev(values) if len(values) > 1 else math.nan,
    }


def print_table(results: dict[str, dict[str, Any]]) -> None:
    head = f"{'corpus':8s} {'seed':>4s} {'model':8s} {'shifted H':>9s} {'orig H':>7s} {'test':>6s}"
    head += f" {'R (gate)':>8s} {'slice cand/live':>15s} {'judged tr/ho':>12s}  published"
    print(head)
    for corpus, res in results.items():
        live = res["summary"]["live"]
        print(f"{corpus:8s} {'-':>4s} {'live':8s} {live['shifted']:9.3f} {live['original']:7.3f} "
              f"{live['test']:6.3f}")  # fmt: skip
        for row in res["rows"]:
            for arm in res["summary"]["arms"]:
                a = row[arm]
                n = a["ndcg@10"]
                fb = a["feedback"] or {}
                held = fb.get("heldout") or {}
                pair = f"{held['candidate_ndcg@10']:.3f}/{held['live_ndcg@10']:.3f}" if held else "-"
                counts = (
                    f"{fb.get('train_queries', 0)}/{fb.get('heldout_queries', 0)}"
                    if ARMS[arm].feedback != "exclude"
                    else "-"
                )
                print(f"{corpus:8s} {row['seed']:4d} {arm:8s} {n['shifted']:9.3f} {n['original']:7.3f} "
                      f"{n['test']:6.3f} {a['gate_eval_ndcg@10']:8.3f} {pair:>15s} {counts:>12s}  "
                      f"{'yes' if a['published'] else 'no'}")  # fmt: skip
    print()
    print(
        f"{'corpus':8s} {'seeds':>5s} {'model':8s} {'Δ shifted H':>11s} {'Δ orig H':>8s} {'Δ test':>7s} published"
    )
    for corpus, res in results.items():
        s = res["summary"]
        for arm in s["arms"]:
            d = s[arm]["delta_mean"]
            print(f"{corpus:8s} {s['seeds']:5d} {arm:8s} {d['shifted']:+11.3f} {d['original']:+8.3f} "
                  f"{d['test']:+7.3f} {s[arm]['published']}/{s['seeds']}")  # fmt: skip
        for arm in s["arms"]:
            control = CONTROLS.get(arm)
            paired = [
                (control, s.get(f"{arm}_minus_{control}_shifted")),
                ("live", s[arm]["minus_live_shifted"]),
            ]
            for name, d in paired:
                if d is not None:
                    print(f"{corpus:8s} {arm} − {name} on shifted H, per seed: mean {d['mean']:+.3f} "
                          f"(min {d['min']:+.3f}, max {d['max']:+.3f})")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="work folder (datasets, bundles; shared with live_feedback)")
    add_corpus_options(p)
    p.add_argument("--seeds", default="3", help="per corpus: N, or demo=N,scifact=M")
    p.add_argument("--users", type=int, default=80, help="simulated users (judged queries) per seed")
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="start at this seed; --seeds stays the end (--seeds 4 --first-seed 2: seeds 2 and 3). Two processes "
        "on copies of OUT_DIR/<corpus> run disjoint seeds; copy the records into one and rerun it for the table",
    )
    p.add_argument(
        "--shift", choices=SHIFTS, default="keywords", help="how the judged and held-out halves differ"
    )
    p.add_argument(
        "--arms",
        default="include,exclude",
        help=f"comma-separated retrain arms, of {', '.join(ARMS)} (a seed's record gains the missing ones)",
    )
    args = p.parse_args(argv)
    args.arms = args.arms.split(",")
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"--arms: unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    corpora = args.corpora.split(",")
    seeds = seeds_per_corpus(args.seeds, corpora)
    results: dict[str, dict[str, Any]] = {}
    for corpus in corpora:
        if not seeds[corpus]:
            continue
        work, data_dir, parts = corpus_sets(corpus, args.out, args.distractors, args.shift)
        bundles = build_bundle(work, data_dir)
        live_version = BundleFolder(bundles).current_version()
        assert live_version is not None  # build_bundle published it
        live = measure(bundles / live_version / "model", parts["sets"], work / "runs" / "embeddings")
        print(f"  live {live_version}: {_fmt(live)}", flush=True)
        rows = []
        for seed in range(args.first_seed, seeds[corpus]):
            records = work / ("retrain" if args.shift == "keywords" else f"retrain-{args.shift}")
            records.mkdir(parents=True, exist_ok=True)
            record = records / f"seed-{seed}.json"
            row = json.loads(record.read_text(encoding="utf-8")) if record.exists() else None
            if row is None or any(a not in row for a in args.arms):
                judged = parts["judged"]
                row = run_seed_arms(
                    work, data_dir, parts["sets"], judged, args.users, seed, args.arms, record, row
                )
            rows.append(row)
        results[corpus] = {
            "live_version": live_version,
            "summary": summarise(live, rows, args.arms),
            "rows": rows,
        }
    print_table(results)
    if args.results:
        args.results.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
