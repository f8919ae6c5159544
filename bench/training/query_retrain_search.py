"""Choosing the query-side retrain's recipe on the validation carve (never on test).

    nice -n 10 .venv/bin/python -m bench query_retrain_search BUNDLES DATA [--recipes a,b] [--out FILE.json]

BUNDLES holds a live bundle of DATA (e.g. the base model's, `python -m training index --model ''` or
bench/training/retrain_scale.py's); nothing is published. The training pairs and the negatives mined from the live
index are made once (training/distill/query_retrain.py); each recipe then trains a query tower from the
live one with early stopping on the validation carve (training/distill/query_loop.py), and prints its
validation curve's best nDCG@10, the step it was reached at, the loop's seconds, steps/s and (once, after
choosing) test nDCG@10 through the same index. Recipes are QueryRetrainConfig overrides (RECIPES).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

RECIPES: dict[str, dict[str, Any]] = {
    "lora r32 lr2e-4": {},
    "lora r32 lr1e-3": {"query_lr": 1e-3},
    "lora r64 lr5e-4": {"query_lora_rank": 64, "query_lr": 5e-4},
    "full lr2e-5": {"query_tower": "full", "query_lr": 2e-5},
    "full lr6e-5": {"query_tower": "full", "query_lr": 6e-5},
    "lora lr2e-4 0 neg": {"query_hard_negatives": 0},
    "lora lr2e-4 +pseudo 2k": {"query_title_queries": 1000, "query_sentence_queries": 1000},
    "truncated 4 lr1e-4": {"query_tower": "truncated", "query_layers": 4, "query_lr": 1e-4},
    "lora lr1e-3 symmetric": {"query_lr": 1e-3, "query_symmetric": True},
    "lora lr1e-3 +pseudo all": {
        "query_lr": 1e-3,
        "query_title_queries": 5000,
        "query_sentence_queries": 5000,
    },
    "full lr2e-5 +pseudo all": {
        "query_tower": "full",
        "query_lr": 2e-5,
        "query_title_queries": 5000,
        "query_sentence_queries": 5000,
    },
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", type=Path)
    parser.add_argument("data", type=Path)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--epochs", type=int, default=8, help="most epochs; early stopping decides")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def print_row(name: str, row: dict[str, Any]) -> None:
    print(f"{name:<26} pairs {row['pairs']:>6}  val {row['val_live']:.4f} -> {row['val_best']:.4f} "
          f"(step {row['best_step']}/{row['steps']})  loop {row['loop_s']:7.1f} s  "
          f"{row['steps_per_s']:.2f} steps/s  test {row['test_live']:.4f} -> {row['test']:.4f}  "
          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


def print_best(results: list[dict[str, Any]]) -> None:
    best = max(results, key=lambda r: (r["val_best"], -r["loop_s"]))
    per_minute = {r["recipe"]: (r["val_best"] - r["val_live"]) / max(r["loop_s"] / 60, 1e-9) for r in results}
    print(f"best on validation: {best['recipe']}; validation gain per loop-minute: "
          + ", ".join(f"{k} {v:+.4f}" for k, v in per_minute.items()))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    from contract.bundles.bundle import MODEL_DIR, load_bundle
    from contract.config import TrainConfig
    from contract.query_config import QueryRetrainConfig
    from training.bundle.store import BundleStore
    from training.distill.query_loop import LoopControl, TowerTargets, fit_query_tower
    from training.distill.query_retrain import (
        carve_validator,
        encode_queries,
        retrain_splits,
        training_inputs,
    )
    from training.distill.query_tower import query_tower
    from training.eval.search_metrics import search_metrics

    store = BundleStore(args.bundles)
    version = str(store.current_version())
    live = load_bundle(store.version_path(version), verify=False, mmap=True)
    train_config = TrainConfig()
    fit, val, test = retrain_splits(args.data, train_config)
    t_ids = [q for q in test.queries if test.qrels.get(q)]
    t_texts = [test.queries[q] for q in t_ids]
    live_test = search_metrics(live.encoder.similarity, live.encoder.encode(t_texts, kind="query"), t_ids,
                               test.qrels, live.doc_ids, index=live.index)["ndcg@10"]  # fmt: skip
    results: list[dict[str, Any]] = []
    cache: dict[tuple[int, int, int], Any] = {}
    for name in [r.strip() for r in args.recipes.split(",") if r.strip()]:
        config = QueryRetrainConfig(query_epochs=args.epochs, **RECIPES[name])
        key = (config.query_hard_negatives, config.query_title_queries, config.query_sentence_queries)
        if key not in cache:
            started = time.perf_counter()
            cache[key] = (
                *training_inputs(live, fit, config, train_config.seed),
                time.perf_counter() - started,
            )
        pairs, negatives, docs, prep_s = cache[key]
        tower = query_tower(store.version_path(version) / MODEL_DIR, config, seed=0)
        loop = fit_query_tower(
            tower, TowerTargets(pairs, docs, negatives), temperature=live.encoder.similarity.logit_divisor(),
            config=config, control=LoopControl(0, validate=carve_validator(live, tower.model, val)),
        )  # fmt: skip
        test_ndcg = search_metrics(live.encoder.similarity, encode_queries(tower.model, t_texts), t_ids, test.qrels,
                                   live.doc_ids, index=live.index)["ndcg@10"]  # fmt: skip
        row = {
            "recipe": name, "config": RECIPES[name], "pairs": len(pairs.texts), "prep_s": round(prep_s, 1),
            "steps": loop.steps, "best_step": loop.best_step, "loop_s": loop.seconds,
            "steps_per_s": round(loop.steps / max(loop.seconds, 1e-9), 3), "val_live": loop.curve[0]["ndcg@10"],
            "val_best": loop.best_validation, "test": round(test_ndcg, 4), "test_live": round(live_test, 4),
            "curve": loop.curve,
        }  # fmt: skip
        results.append(row)
        print_row(name, row)
        if args.out is not None:
            args.out.write_text(json.dumps(results, indent=1))
    print_best(results)
    live.docstore.close()


if __name__ == "__main__":
    main()
