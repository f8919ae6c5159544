"""The mutation log: consecutive seqs per batch, atomic batches, reads by range, durability across processes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from contract.mutations.log import (
    Mutation,
    MutationLog,
    MutationLogError,
    NewDocument,
    ReplicaState,
    encoder_key,
    latest_per_document,
    seq_of_manifest,
)
from tests.conftest import REPO


def test_batches_get_consecutive_seqs_and_read_back(tmp_path):
    log = MutationLog(tmp_path)
    assert log.head() == 0 and log.entries(0) == [] and not log.exists()  # reading creates nothing
    docs = [NewDocument("a", "t", "x", {"k": [1, {"n": None}]}), NewDocument("b", "", "y", {})]
    vecs = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert log.append_upserts(docs, vecs, "key1") == (1, 2)
    assert log.append_deletes(["a", "zz"]) == (3, 4)
    rows = log.entries(0)
    assert [(m.seq, m.op, m.doc_id) for m in rows] == [
        (1, "upsert", "a"),
        (2, "upsert", "b"),
        (3, "delete", "a"),
        (4, "delete", "zz"),
    ]
    assert rows[0].metadata == {"k": [1, {"n": None}]} and rows[0].encoder_key == "key1"
    assert np.array_equal(rows[1].vector, vecs[1]) and rows[2].vector is None
    assert [m.seq for m in log.entries(1, 3)] == [2, 3]
    assert [m.seq for m in log.entries(0, limit=1)] == [1]
    assert log.last_write("a").op == "delete" and log.last_write("a", upto=2).op == "upsert"
    assert list(latest_per_document(rows)) == ["b", "a", "zz"]


def test_a_failed_batch_writes_nothing(tmp_path):
    log = MutationLog(tmp_path)
    log.append_deletes(["x"])
    with pytest.raises(MutationLogError):
        log.append_upserts([NewDocument("a", "", "x", {})], np.zeros((2, 4), np.float32), "k")
    good = ("upsert", "a", "", "x", "{}", None, None, 0.0)
    bad = (
        "rename",
        "b",
        "",
        "x",
        "{}",
        None,
        None,
        0.0,
    )  # refused by the table's CHECK: the batch rolls back
    with pytest.raises(MutationLogError, match="nothing was applied"):
        log._append([good, bad])
    assert log.head() == 1 and [m.doc_id for m in log.entries(0)] == ["x"]


def test_a_commit_is_visible_to_another_process_and_survives_kill(tmp_path):
    code = (
        "import os, sys; from contract.mutations.log import MutationLog; "
        "log = MutationLog(sys.argv[1]); print(log.append_deletes(['gone'])[1], flush=True); os._exit(9)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 9, out.stderr
    assert MutationLog(tmp_path).entries(0)[0].doc_id == "gone" and out.stdout.strip() == "1"


def test_replica_states_and_manifest_helpers(tmp_path):
    log = MutationLog(tmp_path)
    log.record_replica(ReplicaState("h:1", "v1", 3, 1, 2, updated_at=1e12))
    log.record_replica(ReplicaState("h:1", "v2", 4, 0, 0, updated_at=1e12))
    assert [(r.version, r.applied_seq) for r in log.replicas(60)] == [("v2", 4)]
    assert seq_of_manifest({"mutation_seq": 7}) == 7 and seq_of_manifest({}) == 0
    assert seq_of_manifest({"mutation_seq": "x"}) == 0
    files = {"model/a": "1", "index.faiss": "2"}
    assert encoder_key(files) == encoder_key({**files, "index.faiss": "3"}) != encoder_key({"model/a": "9"})
    assert isinstance(Mutation(seq=1, op="delete", doc_id="a").metadata, dict)
