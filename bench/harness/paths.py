"""Where the benches read and write: the clone, its results folder, the bench cache and the corpora."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"  # committed on purpose (bench/results/README.md)
CACHE = REPO / "var" / "bench"  # bundles, venvs and embeddings a bench builds once and reuses
# BEIR scifact is not shipped with the clone: the shared data folder beside it holds it
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


def require_scifact() -> Path:
    """The scifact folder, or a clear stop when this machine does not have it."""
    if not (SCIFACT / "corpus.jsonl").exists():
        raise SystemExit(f"scifact is missing: this bench needs the BEIR scifact folder at {SCIFACT}")
    return SCIFACT
