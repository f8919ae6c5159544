"""Distilled query encoders on scifact: nDCG@10 / recall@10 of each variant vs the full query encoder.

    flock "$HEAVY_LOCK" .venv/bin/python -m bench distill_scifact [--bundle DIR] [--layers 2] [--epochs 3]

Takes a published bundle (default: the load bench's, var/bench/bundles, whole scifact corpus with the
base all-MiniLM-L6-v2 and an exact index; built by bench/serving/load_bench.py), copies it to a staging folder,
distils the query encoders against its fixed document vectors on scifact's train queries plus corpus
pseudo-queries, and scores them on the 300 test queries through the bundle's index. Prints one row per
variant plus the training record; `--publish` publishes the result as a new version of that bundles folder
(so bench/serving/load_bench.py serves and times the variants).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

from bench.harness.paths import REPO, require_scifact
from training.distill.config import DistillConfig

BUNDLES = REPO / "var" / "bench" / "bundles"
DEFAULT = DistillConfig()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bundles", type=Path, default=BUNDLES, help="bundles folder; its live bundle is used"
    )
    parser.add_argument("--variants", default="distilled,static")
    parser.add_argument("--layers", type=int, default=DEFAULT.layers)
    parser.add_argument("--epochs", type=int, default=DEFAULT.epochs)
    parser.add_argument("--static-epochs", type=int, default=DEFAULT.static_epochs)
    parser.add_argument("--lr", type=float, default=DEFAULT.lr)
    parser.add_argument("--static-lr", type=float, default=DEFAULT.static_lr)
    parser.add_argument("--match-weight", type=float, default=DEFAULT.match_weight)
    parser.add_argument("--titles", type=int, default=DEFAULT.title_queries)
    parser.add_argument("--sentences", type=int, default=DEFAULT.sentence_queries)
    parser.add_argument("--sentences-per-doc", type=int, default=DEFAULT.sentences_per_doc)
    parser.add_argument("--static-sparse", action="store_true", help="sparse gradients for the static table")
    parser.add_argument("--publish", action="store_true", help="publish the bundle with its variants")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from training.bundle.store import BundleStore
    from training.data.beir import load_beir
    from training.distill.bundle_step import attach_query_encoders

    store = BundleStore(args.bundles)
    live = store.current_version()
    if live is None:
        raise SystemExit(
            f"{args.bundles}: nothing is live; run `python -m bench load_bench --bundles DIR` once to build it"
        )
    config = DistillConfig(
        variants=args.variants.split(","),
        layers=args.layers,
        epochs=args.epochs,
        static_epochs=args.static_epochs,
        lr=args.lr,
        static_lr=args.static_lr,
        match_weight=args.match_weight,
        title_queries=args.titles,
        sentence_queries=args.sentences,
        sentences_per_doc=args.sentences_per_doc,
        static_sparse=args.static_sparse,
    )
    train, test = load_beir(require_scifact(), "train"), load_beir(require_scifact(), "test")
    with store.build_dir() as staging:
        shutil.copytree(store.version_path(live), staging, dirs_exist_ok=True)
        shutil.rmtree(staging / "query_encoders", ignore_errors=True)
        record = attach_query_encoders(
            staging, train, test.queries, test.qrels, config=config, new_version=True
        )
        print(f"\nscifact test, {record['n_queries']} queries, bundle {live}")
        print("| query encoder | nDCG@10 | recall@10 | nDCG loss | ms/query (build) | train s |")
        print("|---|---:|---:|---:|---:|---:|")
        full = record["full"]
        print(f"| full (torch) | {full['ndcg@10']:.4f} | {full['recall@10']:.4f} | 0 | | |")
        for name, v in record["variants"].items():
            label = f"{name} ({v['training'].get('layers')} layers)" if name == "distilled" else name
            print(
                f"| {label} | {v['ndcg@10']:.4f} | {v['recall@10']:.4f} | {v['ndcg_loss']:+.4f} | "
                f"{v['build_ms_per_query']:.3f} | {v['training']['seconds']} |"
            )
        print(json.dumps({k: v["training"] for k, v in record["variants"].items()}, indent=1))
        if args.publish:
            print(f"published {store.publish(staging, force=True).version}")


if __name__ == "__main__":
    main()
