"""The benchmarks page's plots, drawn from the results the benches wrote (bench/results/*.json).

    python scripts/benchmark_plots.py [--results bench/results] [--out docs/benchmarks]

`make docs` runs it before `mkdocs build`, so the page's plots are always the committed results' (the
PNGs are committed too, so the Markdown reads on its own). Each plot names the bench that produced it in
its title; nothing here measures anything.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

REPO = Path(__file__).resolve().parents[1]
RETRAIN_CORPORA = {  # result file -> the corpus it measured (bench/training/retrain_scale.py)
    "retrain_scale_demo.json": "pydocs (1.1k docs)",
    "retrain_scale_scifact.json": "scifact (5.2k docs)",
    "retrain_scale_packages15k.json": "packages (15k docs)",
}


def _load(results: Path, name: str) -> Any:
    path = results / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"{path}: missing (run the bench that writes it, or pass --results)") from None


def retrain_cost(results: Path, out: Path) -> Path:
    """Full vs query-side retrain: minutes to live and the served nDCG@10 gained, per corpus."""
    labels, minutes, gains = [], {"full": [], "query": []}, {"full": [], "query": []}
    for name, label in RETRAIN_CORPORA.items():
        run = _load(results, name)["0"]
        labels.append(label)
        for scope in ("full", "query"):
            minutes[scope].append(run[scope]["seconds"] / 60)
            gains[scope].append(run[scope]["dense"] - run["base_dense"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = range(len(labels))
    for offset, scope in ((-0.2, "full"), (0.2, "query")):
        left.bar([i + offset for i in x], minutes[scope], 0.4, label=scope)
        right.bar([i + offset for i in x], gains[scope], 0.4, label=scope)
    left.set_ylabel("minutes to live (2 cores)")
    right.set_ylabel("test nDCG@10 (dense) gained")
    right.axhline(0, color="grey", linewidth=0.8)
    for ax in (left, right):
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.legend(title="retrain")
    fig.suptitle("Full vs query-side retrain (bench/training/retrain_scale.py)")
    return _save(fig, out / "retrain_cost.png")


def serving_throughput(results: Path, out: Path) -> Path:
    """Queries per second at each concurrency: this service against the naive FastAPI + torch + flat app."""
    runs = _load(results, "load_bench_corpora.json")["results"]
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.8), sharey=True)
    for ax, run in zip(axes, runs, strict=True):
        systems: dict[str, list[tuple[int, float]]] = {}
        for row in run["rows"]:
            systems.setdefault(row["system"], []).append((row["concurrency"], row["qps"]))
        for system, points in systems.items():
            points.sort()
            ax.plot([c for c, _ in points], [q for _, q in points], marker="o", label=system)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_title(run["corpus"])
    axes[0].set_ylabel("queries / s")
    axes[0].legend(fontsize=7)
    fig.suptitle("POST /search throughput, same machine, same run (bench/serving/load_bench.py)")
    return _save(fig, out / "serving_throughput.png")


def recipe_search(results: Path, out: Path) -> Path:
    """Each training recipe tried on scifact: validation nDCG@10 against its training time."""
    recipes = _load(results, "recipe_search.json")
    fig, ax = plt.subplots(figsize=(7, 4))
    for recipe in recipes:
        minutes, ndcg = recipe["train_seconds"] / 60, recipe["validation"]["tuned"]["ndcg@10"]
        ax.scatter(minutes, ndcg)
        ax.annotate(recipe["name"], (minutes, ndcg), fontsize=7, xytext=(3, 3), textcoords="offset points")
    base = recipes[0]["validation"]["base"]["ndcg@10"]
    ax.axhline(base, color="grey", linestyle="--", linewidth=0.8, label=f"base model {base:.3f}")
    ax.set_xlabel("training minutes (2 cores, machine shared)")
    ax.set_ylabel("validation nDCG@10")
    ax.legend(fontsize=8)
    ax.set_title("Training recipes on scifact (bench/training/recipe_search.py)")
    return _save(fig, out / "recipe_search.png")


PLOTS: tuple[Callable[[Path, Path], Path], ...] = (retrain_cost, serving_throughput, recipe_search)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    # metadata without the software/date stamps: the same results give the same bytes, so a rerun leaves git clean
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        print(plot(args.results, args.out).relative_to(args.out.parent))  # noqa: T201 - a CLI


if __name__ == "__main__":
    main()
