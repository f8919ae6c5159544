"""nDCG per CPU-minute of fine-tuning recipes: the rule that chooses TrainConfig's defaults.

    .venv/bin/python -m bench recipe_cost bench/results/recipe_search.json:NAME,NAME \
        bench/results/recipe_search_demo.json:NAME,NAME [--tolerance 0.005]

Reads rows that bench/training/recipe_search.py wrote (validation nDCG@10 of the base and tuned model on the same
held-out carve, the training steps' seconds) and prints, per corpus, each recipe's gain over the base
model, its training seconds, the gain per training minute and the process's peak resident memory (base
evaluation, steps and tuned corpus encode; rows written before recipe_search.py recorded it show –).
The rows compared must come from one machine in one sitting (their seconds are compared;
recipe_search.py records threads and load). The
chosen recipe is the cheapest whose validation nDCG@10 is within `--tolerance` (the publish gate's, by
default) of the best: the best nDCG per CPU-minute among recipes that are not clearly worse, rather than
the best nDCG alone. The carve's paired differences (docs/bench-retired.md, recipe_compare) say how large "clearly" is.
With several corpora (the same recipe names in each), the default is the cheapest recipe that passes on
every one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="RESULTS.json:NAME,NAME,…")
    parser.add_argument("--tolerance", type=float, default=0.005, help="nDCG@10 within which recipes tie")
    args = parser.parse_args(argv)
    eligible: list[set[str]] = []  # per corpus, the recipes within the tolerance of its best
    seconds: dict[str, float] = {}
    for source in args.sources:
        path, _, names = source.partition(":")
        rows = {r["name"]: r for r in json.loads(Path(path).read_text())}
        chosen = [rows[n] for n in names.split(",")] if names else list(rows.values())
        print(f"\n{Path(path).name}")
        print(
            "| recipe | options | validation nDCG@10 base → tuned | gain | train s | gain per train minute | peak RSS MB | torch threads | load before → after |"
        )
        print("|---|---|---|---:|---:|---:|---:|---:|---|")
        best = max(r["validation"]["tuned"]["ndcg@10"] for r in chosen)
        for r in sorted(chosen, key=lambda r: r["train_seconds"]):
            base, tuned = r["validation"]["base"]["ndcg@10"], r["validation"]["tuned"]["ndcg@10"]
            gain = tuned - base
            print(f"| {r['name']} | {json.dumps(r['options'])} | {base:.4f} → {tuned:.4f} | {gain:+.4f} | "
                  f"{r['train_seconds']:.0f} | {60 * gain / r['train_seconds']:+.4f} | {r.get('peak_rss_mb', '–')} | "
                  f"{r.get('torch_threads', '?')} | "
                  f"{r['load_average_before']} → {r['load_average_after']} |")  # fmt: skip
        ties = [r for r in chosen if r["validation"]["tuned"]["ndcg@10"] >= best - args.tolerance]
        pick = min(ties, key=lambda r: r["train_seconds"])
        print(f"cheapest within {args.tolerance} of the best validation nDCG@10 ({best:.4f}): {pick['name']}")
        eligible.append({r["name"] for r in ties})
        for r in chosen:
            seconds[r["name"]] = seconds.get(r["name"], 0.0) + r["train_seconds"]
    common = set.intersection(*eligible) if eligible else set()
    if len(args.sources) > 1:
        pick_all = min(common, key=lambda n: seconds[n]) if common else None
        print(
            f"\nwithin {args.tolerance} of the best on every corpus, cheapest in total: {pick_all or 'none'}"
        )


if __name__ == "__main__":
    main()
