"""Retrain to live, full vs query-side, on the same training pairs and test queries as the corpus grows.

    nice -n 10 .venv/bin/python -m bench retrain_scale WORK [--data ../shared/data/scifact]
        [--sizes 0,10000,100000,1000000] [--full-sizes 0] [--no-distill] [--no-onnx] [--time-budget S]

Size 0 is the dataset itself (scifact: 5,183 abstracts; the demo corpus: its docstrings). Larger sizes add
distractor documents to its corpus until it holds that many: their vectors cost nothing to make — drawn
from a Gaussian mixture fitted to the real base-model embeddings (bench/index/index_bench.py's sampler) — and
their texts are a few words drawn from the corpus' own vocabulary (so BM25 indexes realistic sparse
rows). Queries, judgements and training pairs are the dataset's at every size.

For each size: a base bundle (the packaged all-MiniLM-L6-v2's vectors, exact FAISS index, BM25) is
published as the live version (setup, timed apart), then
- query-side: `run_pipeline` with retrain_scope query with the job's defaults (training/distill/query_retrain.py:
  no document is encoded), timed from the call to the new version being live;
- full (only at --full-sizes, which must be real corpora: a tuned model cannot encode synthetic vectors):
  the live bundle is rolled back to the base version and `run_pipeline` with retrain_scope full runs, timed the same
  way (one corpus encode: the live vectors stand in for the base model's).
nDCG@10 is on the test split through each version's own index (dense) and in its served mode.

`--time-budget S` gives the full retrain a wall-clock budget of S seconds (TrainConfig.time_budget_s, what
`pipeline --time-budget` sets): it is recorded as a second full retrain of the size (`full-budget-S`), run
before the unbudgeted one (unless `--skip-full`), and printed beside it, from the same base bundle.
`--set KEY=VALUE` (repeatable) changes the full retrains' recipe (TrainConfig fields, values as JSON, e.g.
`--set hard_negatives=1 --set grad_cache=false`): they are recorded as `full-<--name>` (and
`full-<--name>-budget-S`), so recipes run into one WORK print side by side against the default's `full`.

Full retrains at sizes that were not run are a PROJECTION, printed as such: the measured full run's
time with its corpus encode scaled linearly to the size (its measured documents/s) and its index and
BM25 phases replaced by the ones the setup measured at that size.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.paths import SCIFACT
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan, retrain_plan
from training.eval.embedding_cache import EmbeddingCache
from training.train.run_hooks import RunHooks


def make_dataset(src: Path, out: Path, size: int, seed: int = 0) -> tuple[Path, int]:
    """`src` with distractor documents appended until the corpus holds `size` (0: as it is)."""
    if out.exists():
        n = sum(1 for _ in (out / "corpus.jsonl").open())
        return out, n
    out.mkdir(parents=True)
    for name in ("queries.jsonl",):
        shutil.copy(src / name, out / name)
    shutil.copytree(src / "qrels", out / "qrels")
    lines = (src / "corpus.jsonl").read_text().splitlines()
    n_real = len(lines)
    with (out / "corpus.jsonl").open("w") as f:
        f.write("\n".join(lines) + "\n")
        if size > n_real:
            words = sorted({w for line in lines[:2000] for w in re.findall(r"[a-z]{4,}", line.lower())})
            rng = np.random.default_rng(seed)
            picks = rng.integers(0, len(words), size=(size - n_real, 8))
            for i, row in enumerate(picks):
                text = " ".join(words[j] for j in row)
                f.write(json.dumps({"_id": f"distractor-{i}", "title": "", "text": text}) + "\n")
    return out, max(size, n_real)


def base_bundle(data: Path, bundles: Path, cache_dir: Path, n_real: int, seed: int = 0) -> dict[str, Any]:
    """Publish the base model's bundle of `data` (real vectors for the first n_real documents, fitted
    synthetic ones for the rest, put in the embedding cache so `index` reads them instead of encoding)."""
    from contract.encoding.encoder import Encoder, document_text
    from training.data.beir import load_corpus
    from training.publish.index_model import index_model
    from training.train.phase_timer import PhaseTimer

    cache = EmbeddingCache(cache_dir, max_entries=64)
    encoder = Encoder.load()
    corpus = load_corpus(data / "corpus.jsonl")
    texts = [document_text(d.title, d.text) for d in corpus.values()]
    if len(texts) > n_real:
        from bench.index.index_bench import mixture_sampler

        real = cache.get_or_compute(
            encoder, texts[:n_real], lambda: encoder.encode(texts[:n_real], show_progress=True)
        )
        sample = mixture_sampler(np.asarray(real), n_clusters=64, seed=seed)
        synthetic = sample(len(texts) - n_real, np.random.default_rng(seed))
        cache.get_or_compute(encoder, texts, lambda: np.concatenate([np.asarray(real), synthetic]))
    timer = PhaseTimer()
    started = time.perf_counter()
    first = index_model(
        None,
        PublishPlan(
            data=DataPlan(data_dir=str(data)),
            index=IndexPlan(kind="flat"),
            publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False),
        ),
        RunHooks(show_progress=False, cache=cache, timer=timer),
    )
    return {"version": first.version, "seconds": time.perf_counter() - started, "phases": timer.seconds}


def retrain(
    data: Path,
    bundles: Path,
    work: Path,
    tower: str,
    *,
    onnx: bool,
    distill: bool,
    budget_s: float | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from contract.bundles.bundle import read_manifest
    from contract.config import TrainConfig
    from contract.query_config import QueryRetrainConfig
    from training.publish.pipeline import run_pipeline

    started = time.perf_counter()
    publish = PublishPlan(
        data=DataPlan(data_dir=str(data)),
        publication=PublicationPlan(bundles_dir=str(bundles), onnx=onnx, distill=distill),
    )
    config = TrainConfig(time_budget_s=budget_s, **(overrides or {}))
    plan = retrain_plan(config, QueryRetrainConfig(), publish, tower)  # type: ignore[arg-type]
    result = run_pipeline(plan, work, RunHooks(show_progress=False, cache=EmbeddingCache(work / "cache")))
    seconds = time.perf_counter() - started
    manifest = read_manifest(bundles / result.publish.version)
    served = manifest.extras.get("retrieval", {}).get("default_mode", "dense")
    return {
        "tower": result.scope, "seconds": seconds, "live": result.publish.live, "reason": result.publish.reason,
        "version": result.publish.version, "phases": result.timer.seconds, "steps": result.timer.steps,
        "peak_rss_mb": result.timer.to_json()["peak_rss_mb"], "peak_rss_phase": result.timer.peak_phase(),
        "peak_rss_mb_after": result.timer.peak_rss_after,
        "dense": manifest.metrics.get("test.dense", manifest.metrics.get("test", {})).get("ndcg@10"),
        "served_mode": served, "served": manifest.metrics.get("test", {}).get("ndcg@10"),
        "time_budget_s": budget_s, "budget": result.timer.notes.get("time_budget"), "recipe": overrides or {},
    }  # fmt: skip


def projection(full: dict[str, Any], n_full: int, setup: dict[str, Any], n: int) -> float:
    """The measured full retrain at n_full documents, scaled to n: corpus encode linear in documents, index
    and BM25 phases as the setup measured them at n."""
    phases = full["phases"]
    encode = phases.get("encode + evaluate (tuned)", 0.0)
    index = phases.get("index + bundle", 0.0) + phases.get("lexical index + fusion tuning", 0.0)
    setup_index = setup["phases"].get("index + bundle", 0.0) + setup["phases"].get(
        "lexical index + fusion tuning", 0.0
    )
    return float(full["seconds"] - encode - index + encode * n / n_full + setup_index)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--sizes", default="0,10000,100000,1000000")
    parser.add_argument("--full-sizes", default="0")
    parser.add_argument("--no-onnx", action="store_true")
    parser.add_argument("--no-distill", action="store_true")
    parser.add_argument(
        "--time-budget", type=float, default=None, help="seconds: also run a budgeted full retrain"
    )
    parser.add_argument("--skip-full", action="store_true", help="at --full-sizes, only the budgeted one")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TrainConfig field for the full retrains (value as JSON), e.g. hard_negatives=1",
    )
    parser.add_argument("--name", default="", help="the recipe's name in the results (with --set)")
    parser.add_argument(
        "--skip-query", action="store_true", help="only the full retrains (another WORK runs the rest)"
    )
    parser.add_argument(
        "--merge", type=Path, action="append", default=[], help="another WORK's results to print with"
    )
    parser.add_argument(
        "--project",
        default="",
        help="comma-separated sizes to print a full-retrain projection for (index and BM25 phases scaled "
        "linearly from the nearest measured setup)",
    )
    args = parser.parse_args(argv)
    args.overrides = recipe_overrides(parser, args.overrides)
    if args.overrides and not args.name:
        parser.error("--set needs --name: the recipe's results key is full-<name>")
    return args


def recipe_overrides(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs as TrainConfig fields, checked against TrainConfig now rather than an hour in."""
    from pydantic import ValidationError

    from contract.config import TrainConfig

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in TrainConfig.model_fields:
            parser.error(f"--set {pair!r}: expected KEY=VALUE with KEY a TrainConfig field")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw  # a bare string, e.g. cpu_bf16=off
    try:
        TrainConfig(**overrides)
    except ValidationError as err:
        parser.error(f"--set: {err}")
    return overrides


def measure_size(
    args: argparse.Namespace, size: int, results: dict[str, Any], results_file: Path, n_real: int, full: bool
) -> None:
    """One corpus size: its base bundle, then the query-side and (when asked) the full retrain, each
    recorded in results_file as soon as it is done (a rerun resumes)."""
    from contract.bundles.bundle import read_manifest
    from training.bundle.store import BundleStore

    key = str(size)
    row = results.setdefault(key, {})
    data, n_docs = make_dataset(args.data, args.work / f"data-{size}", size)
    bundles = args.work / f"bundles-{size}"
    row["n_docs"] = n_docs
    if "setup" not in row:
        shutil.rmtree(bundles, ignore_errors=True)
        row["setup"] = base_bundle(data, bundles, args.work / "cache", n_real)
        results_file.write_text(json.dumps(results, indent=1))
    store = BundleStore(bundles)
    base_m = read_manifest(bundles / row["setup"]["version"])
    row["base_dense"] = base_m.metrics.get("test.dense", {}).get("ndcg@10")
    row["base_served"] = base_m.metrics.get("test", {}).get("ndcg@10")
    if "query" not in row and not args.skip_query:
        store.activate(row["setup"]["version"])
        row["query"] = retrain(data, bundles, args.work / f"runs-{size}", "query",
                               onnx=not args.no_onnx, distill=not args.no_distill)  # fmt: skip
        results_file.write_text(json.dumps(results, indent=1))
    # the budgeted run first: it is the shorter, and a stopped invocation resumes with the other
    budgets: list[float | None] = [args.time_budget] if args.time_budget else []
    budgets += [] if args.skip_full else [None]
    for budget in budgets if full else []:
        name = full_key(budget, args.name)
        if name in row:
            continue
        if n_docs > n_real:
            raise SystemExit(f"size {size}: a full retrain needs real texts; use --full-sizes 0")
        store.activate(row["setup"]["version"])
        row[name] = retrain(data, bundles, args.work / f"runs-{size}", "full",
                            onnx=not args.no_onnx, distill=not args.no_distill, budget_s=budget,
                            overrides=args.overrides)  # fmt: skip
        results_file.write_text(json.dumps(results, indent=1))
    print(f"size {size}: {json.dumps({k: v for k, v in row.items() if k != 'setup'})[:400]}", flush=True)


def full_key(budget_s: float | None, name: str = "") -> str:
    """The results key of a full retrain: `full`, `full-budget-600` under a 600 s budget, `full-NAME` and
    `full-NAME-budget-600` for a recipe named NAME."""
    key = f"full-{name}" if name else "full"
    return key if budget_s is None else f"{key}-budget-{budget_s:g}"


def print_time_table(results: dict[str, Any], measured: dict[str, Any] | None) -> None:
    print("\n| documents | query-side to live (s) | query-side nDCG@10 dense (base → tuned) | full to live (s) "
          "| full nDCG@10 dense | query-side time / full | query-side gain / full gain |")  # fmt: skip
    print("|---:|---:|---|---:|---:|---:|---:|")
    for row in sorted(results.values(), key=lambda r: r["n_docs"]):
        q = row.get("query")
        if q is None:
            continue
        if "full" in row:
            full_s, full_label, full_dense = (
                row["full"]["seconds"],
                f"{row['full']['seconds']:.0f}",
                row["full"]["dense"],
            )
        elif measured is not None:
            full_s = projection(measured["full"], measured["n_docs"], row["setup"], row["n_docs"])
            full_label, full_dense = f"{full_s:.0f} (projection)", None
        else:
            full_s, full_label, full_dense = None, "–", None
        gain = "–"
        if full_dense is not None and full_dense != row["base_dense"]:
            gain = f"{(q['dense'] - row['base_dense']) / (full_dense - row['base_dense']):.2f}"
        ratio = f"{q['seconds'] / full_s:.3f}" if full_s else "–"
        print(f"| {row['n_docs']:,} | {q['seconds']:.0f} | {row['base_dense']:.4f} → {q['dense']:.4f} | {full_label} | "
              f"{'–' if full_dense is None else f'{full_dense:.4f}'} | {ratio} | {gain} |")  # fmt: skip


def print_phase_table(results: dict[str, Any]) -> None:
    # the served mode is what the gate compares, and the static tower's distillation is part of both times
    print("\n| documents | retrain | to live (s) | of which: distill static tower (s) | served mode | nDCG@10 served "
          "(base → tuned) | live | peak RSS MB, the process so far (reached in) |")  # fmt: skip
    print("|---:|---|---:|---:|---|---|---|---:|")
    for row in sorted(results.values(), key=lambda r: r["n_docs"]):
        for name in sorted(k for k in row if k == "query" or k.startswith("full")):
            r = row[name]
            distill = r["phases"].get("distill query encoders", 0.0)
            where = f" ({r['peak_rss_phase']})" if r.get("peak_rss_phase") else ""
            print(f"| {row['n_docs']:,} | {name} | {r['seconds']:.0f} | {distill:.0f} | {r['served_mode']} | "
                  f"{row['base_served']:.4f} → {r['served']:.4f} | {r['live']} | {r['peak_rss_mb']:.0f}{where} |")  # fmt: skip


def print_variant_table(results: dict[str, Any]) -> None:
    """Each other full retrain of a size (a budget, a recipe of --set) and then the default unbudgeted one
    (where that ran): time to live and its share of the default's, the steps run, and the dense gain and its
    share of the default's."""
    sized = sorted(results.values(), key=lambda r: r["n_docs"])
    if not any(k.startswith("full-") for row in sized for k in row):
        return
    print("\n| documents | full retrain | recipe | budget (s) | to live (s) | time / default's | steps run / planned "
          "| nDCG@10 dense (base → tuned) | gain / default's gain |")  # fmt: skip
    print("|---:|---|---|---:|---:|---:|---:|---|---:|")
    for row in sized:
        variants = sorted(k for k in row if k.startswith("full-"))
        default = row.get("full")
        for name in variants + (["full"] if variants and default else []):
            r = row[name]
            b = r.get("budget") or {}
            steps = (
                f"{b['steps_run']} / {b['planned_steps']}" if b else f"{r['steps'].get('train steps', '–')}"
            )
            time_ratio, gain_ratio = "–", "–"
            if name != "full" and default is not None:
                time_ratio = f"{r['seconds'] / default['seconds']:.2f}"
                if default["dense"] != row["base_dense"]:
                    gain_ratio = (
                        f"{(r['dense'] - row['base_dense']) / (default['dense'] - row['base_dense']):.2f}"
                    )
            recipe = " ".join(f"{k}={json.dumps(v)}" for k, v in (r.get("recipe") or {}).items()) or "default"
            print(f"| {row['n_docs']:,} | {name} | {recipe} | {r.get('time_budget_s') or '–'} | {r['seconds']:.0f} | "
                  f"{time_ratio} | {steps} | {row['base_dense']:.4f} → {r['dense']:.4f} | {gain_ratio} |")  # fmt: skip


def print_projections(results: dict[str, Any], measured: dict[str, Any] | None, project: str) -> None:
    for size in [int(x) for x in project.split(",") if x]:
        if measured is None:
            break
        near = min(results.values(), key=lambda r: abs(r["n_docs"] - size))
        scale = size / near["n_docs"]
        setup = {"phases": {k: v * scale for k, v in near["setup"]["phases"].items()}}
        print(f"full retrain at {size:,} documents: {projection(measured['full'], measured['n_docs'], setup, size):.0f} s "
              f"(PROJECTION: measured full run at {measured['n_docs']:,} documents, corpus encode scaled linearly, "
              f"index and BM25 phases scaled from the setup at {near['n_docs']:,})")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("training", "contract"):
        logging.getLogger(name).setLevel(logging.INFO)
    args.work.mkdir(parents=True, exist_ok=True)
    results_file = args.work / "retrain_scale.json"
    results: dict[str, Any] = json.loads(results_file.read_text()) if results_file.exists() else {}
    n_real = sum(1 for _ in (args.data / "corpus.jsonl").open())
    full_sizes = {int(s) for s in args.full_sizes.split(",") if s}
    for size in [int(s) for s in args.sizes.split(",") if s]:  # "" prints the table of WORK only
        measure_size(args, size, results, results_file, n_real, size in full_sizes)
    for other in args.merge:  # rows of another WORK (e.g. its full retrain), this WORK's own first
        for key, row in json.loads((other / "retrain_scale.json").read_text()).items():
            for part, value in row.items():
                results.setdefault(key, {}).setdefault(part, value)
    measured = next((r for r in results.values() if "full" in r), None)
    print_time_table(results, measured)
    print_phase_table(results)
    print_variant_table(results)
    print_projections(results, measured, args.project)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
