"""Shared fixtures: the real small encoder (loaded once) and the project's own retrieval dataset.

The dataset is the demo's (training/data/demo_data.py: this Python's standard-library docstrings, one
relevant document per query), built once per session into a temporary folder, so the suite needs nothing
beside the clone. Checks that need the scifact benchmark's own numbers live in bench/ (bench/training/scifact_checks.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# 600 documents (450 train / 150 test queries): more than any test's slice draws (at most 40 train
# queries, 30 test queries and 200 distractors), so slices stay seeded samples rather than the whole set
DEMO_DOCS = 600
DEMO_TEST_QUERIES = 150


@pytest.fixture(scope="session")
def demo_dataset(tmp_path_factory) -> Path:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv) of the standard library's
    docstrings: deterministic for this Python, built in seconds, shared read-only by the session."""
    from training.data.demo_data import build_demo_dataset

    folder = tmp_path_factory.mktemp("demo-dataset") / "pydocs"
    return build_demo_dataset(folder, n_docs=DEMO_DOCS, n_test=DEMO_TEST_QUERIES)


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


@pytest.fixture(scope="session")
def milvus_standalone_server(tmp_path_factory):
    """One real Milvus standalone server for the session; each module that uses it keeps its own collection
    prefix, so they do not see each other's collections. The failure tests (tests/app/bundles/
    test_milvus_failures.py) pause, kill and restart this same server, and leave it answering: a second
    server cannot run beside it, since its embedded etcd listens on the fixed peer port 2380."""
    from tests.servers import milvus_standalone_process

    with milvus_standalone_process(tmp_path_factory.mktemp("milvus-standalone")) as server:
        yield server


@pytest.fixture(scope="session")
def milvus_standalone_uri(milvus_standalone_server):
    return milvus_standalone_server.uri


@pytest.fixture(scope="module")
def milvus_lite_uri(tmp_path_factory):
    """A milvus-lite gRPC server for one module (its own data dir)."""
    from tests.servers import milvus_server

    with milvus_server(tmp_path_factory.mktemp("milvus")) as uri:
        yield uri


def milvus_endpoint(request, kind: str) -> str:
    """The Milvus gRPC URI of each kind: `lite` (milvus-lite, one per module) or `server` (the real standalone
    server of the session, whose consistency, load and alias semantics are a cluster proxy's)."""
    return str(request.getfixturevalue("milvus_standalone_uri" if kind == "server" else "milvus_lite_uri"))


@pytest.fixture(scope="module", params=["lite", "server"])
def milvus_uri(request):
    return milvus_endpoint(request, request.param)
