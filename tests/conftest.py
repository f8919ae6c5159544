"""Shared fixtures: the real small encoder (loaded once), and the scifact benchmark when present."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


def scifact_dir() -> Path:
    """Path of ../shared/data/scifact, or skip the calling test with a clear reason."""
    if not (SCIFACT / "corpus.jsonl").exists():
        pytest.skip(
            f"scifact benchmark not found at {SCIFACT} (expected ../shared/data/scifact beside the repo)"
        )
    return SCIFACT


@pytest.fixture(scope="session")
def scifact() -> Path:
    return scifact_dir()


@pytest.fixture(scope="session")
def _base_encoder():
    from contract.encoding.encoder import Encoder

    return Encoder.load()


@pytest.fixture()
def base_encoder(_base_encoder):
    """The packaged all-MiniLM-L6-v2, deep-copied so a test may train or mutate it."""
    return copy.deepcopy(_base_encoder)


@pytest.fixture(scope="session")
def shared_encoder(_base_encoder):
    """Read-only access to the session encoder (no copy): for tests that only encode."""
    return _base_encoder
