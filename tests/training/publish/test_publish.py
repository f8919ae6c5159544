"""`index` end to end on a real slice of the demo dataset with the real encoder: encode, evaluate, build, publish."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from contract.config import TrainConfig
from contract.encoding.encoder import document_text
from contract.errors import JobCancelled
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan
from training.bundle.store import BundleStore
from training.data.beir import load_beir
from training.data.query_sample import subset
from training.eval.evaluate import evaluate, trec_metrics
from training.publish.index_model import index_model
from training.publish.provenance import resolve_run
from training.train.run_hooks import RunHooks

REPO = Path(__file__).resolve().parents[3]


def write_slice(demo_dataset: Path, folder: Path, *, n_queries: int, n_distractors: int) -> Path:
    """A seeded slice of the demo dataset as a BEIR folder (test split only), with a metadata field per document."""
    data = subset(load_beir(demo_dataset, "test"), n_queries=n_queries, n_distractors=n_distractors, seed=0)
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as f:
        for i, doc in enumerate(data.corpus.values()):
            meta = {"bucket": i % 3}
            f.write(
                json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": meta}) + "\n"
            )
    with (folder / "queries.jsonl").open("w") as f:
        for qid, text in data.queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    rows = ["query-id\tcorpus-id\tscore"]
    rows += [f"{q}\t{d}\t{s}" for q, rel in data.qrels.items() for d, s in rel.items()]
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.fixture(scope="module")
def slice_dir(demo_dataset, tmp_path_factory) -> Path:
    """~100 demo-dataset documents: the relevant ones of 20 test queries plus distractors."""
    return write_slice(
        demo_dataset, tmp_path_factory.mktemp("demo") / "slice", n_queries=20, n_distractors=80
    )


@pytest.fixture(scope="module")
def run_dir(shared_encoder, tmp_path_factory) -> Path:
    """A training-run-shaped folder (model/, config.json, metrics.json) around the base model."""
    run = tmp_path_factory.mktemp("run")
    shared_encoder.save(run / "model")
    (run / "config.json").write_text(json.dumps({"loss": "infonce", "epochs": 1}))
    (run / "metrics.json").write_text(json.dumps({"base": {"ndcg@10": 0.6}, "tuned": {"ndcg@10": 0.6}}))
    return run


def test_resolve_run_accepts_run_or_model_folder(run_dir, tmp_path):
    assert resolve_run(run_dir) == (run_dir / "model", run_dir)
    assert resolve_run(run_dir / "model") == (run_dir / "model", run_dir)
    assert resolve_run(tmp_path) == (tmp_path, None)
    (tmp_path / "bundle" / "model").mkdir(parents=True)
    (tmp_path / "bundle" / "manifest.json").write_text("{}")
    assert resolve_run(tmp_path / "bundle" / "model") == (tmp_path / "bundle" / "model", tmp_path / "bundle")


def test_index_model_publishes_a_servable_bundle(run_dir, slice_dir, shared_encoder, tmp_path):
    bundles = tmp_path / "bundles"
    result = index_model(
        run_dir,
        PublishPlan(
            data=DataPlan(data_dir=str(slice_dir)),
            index=IndexPlan(kind="hnsw"),
            publication=PublicationPlan(bundles_dir=str(bundles), distill=False),
        ),
        RunHooks(show_progress=False),
    )
    assert result.live
    store = BundleStore(bundles)
    bundle = store.load_current()
    m = bundle.manifest
    data = load_beir(slice_dir, "test")
    assert m.n_vectors == len(data.corpus) == len(bundle.doc_ids)
    assert m.training_config.config == TrainConfig(
        loss="infonce", epochs=1
    )  # typed (contract.bundles.run_record)
    assert m.extras["training_metrics"]["base"]["ndcg@10"] == 0.6
    # the index was tuned on the real test queries, and the recall it reports is measured
    assert m.index.kind == "hnsw" and m.index.tune_queries == len(data.queries)
    assert m.index.recall_at_10 is not None and m.index.recall_at_10 >= 0.95
    # the gate metric is the exact-search evaluation of this model on the split
    # (oracle: evaluate() on the bundle's stored vectors, which are the encoder's own embeddings)
    stored = bundle.index.exact_vectors(np.arange(m.n_vectors))  # (n, 384)
    first = [data.corpus[i] for i in bundle.doc_ids[:4]]
    fresh = shared_encoder.encode([document_text(d.title, d.text) for d in first])
    np.testing.assert_allclose(stored[:4], fresh, atol=1e-5)
    oracle = evaluate(shared_encoder, data, doc_embeddings=stored, show_progress=False).metrics
    assert m.metrics["test.dense"]["ndcg@10"] == pytest.approx(oracle["ndcg@10"], abs=1e-6)
    # the slice has no train split to carve validation queries from: nothing to tune on, so the bundle
    # serves dense by default (the gate's number) and hybrid keeps the untuned RRF defaults
    retrieval = m.extras["retrieval"]
    assert retrieval["validation"] is None and retrieval["default_mode"] == "dense"
    assert m.metrics["test"] == m.metrics["test.dense"] and retrieval["fusion"]["method"] == "rrf"
    assert 0 < m.metrics["test.lexical"]["ndcg@10"] <= 1 and 0 < m.metrics["test.hybrid"]["ndcg@10"] <= 1
    assert retrieval["lexical"]["n_docs"] == m.n_vectors
    assert bundle.lexical is not None and any(f.startswith("lexical/") for f in m.files)
    # searching the bundle itself (its encoder + index + ids) reproduces that nDCG within ANN error
    qids = list(data.queries)
    q = bundle.encoder.to_index_space(bundle.encoder.encode([data.queries[i] for i in qids], kind="query"))
    run = {
        qid: {bundle.doc_ids[p]: float(s) for p, s in zip(*hits, strict=True)}
        for qid, hits in zip(qids, bundle.index.search(q, 100), strict=True)
    }
    ndcg = float(np.mean(list(trec_metrics(data.qrels, run)["ndcg@10"].values())))
    assert ndcg == pytest.approx(oracle["ndcg@10"], abs=0.02)
    # metadata made it into the document store and filters by it
    allowed = bundle.docstore.filter_positions({"bucket": 1})
    assert len(allowed) == len(range(1, m.n_vectors, 3))
    ((pos, _),) = bundle.index.search(q[:1], 5, allowed=allowed)
    assert all(h["metadata"]["bucket"] == 1 for h in bundle.docstore.get(pos, include=("metadata",)))
    assert not [p for p in bundles.iterdir() if p.name.startswith(".build-")]
    # the ONNX query encoders were exported into the bundle, checksummed, and scored against torch
    onnx = m.extras["onnx"]
    assert set(onnx["ndcg_loss"]) == {"fp32", "int8"} and abs(onnx["ndcg_loss"]["fp32"]) < 0.01
    assert all(f in m.files for f in onnx["files"].values())
    # re-indexing with the live bundle's own model (the reindex job) keeps its training story and
    # passes the gate (same model, same metric)
    again = index_model(
        bundles / result.version / "model",
        PublishPlan(
            data=DataPlan(data_dir=str(slice_dir)),
            index=IndexPlan(kind="flat"),
            publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False),
        ),
        RunHooks(show_progress=False),
    )
    assert again.live and store.current_version() == again.version
    m2 = store.load_current().manifest
    assert m2.training_config == m.training_config and m2.extras["reindexed_from"] == result.version
    assert m2.metrics["test.dense"]["ndcg@10"] == pytest.approx(m.metrics["test.dense"]["ndcg@10"], abs=1e-6)
    assert m2.extras["retrieval"]["default_mode"] == retrieval["default_mode"]  # same carve, same choice


@pytest.mark.parametrize("cancel_at_call", [2, 4], ids=["while-encoding-documents", "just-before-publish"])
def test_a_cancel_during_indexing_publishes_nothing(run_dir, slice_dir, tmp_path, cancel_at_call):
    calls = []

    def checkpoint() -> None:
        calls.append(len(calls) + 1)
        if len(calls) == cancel_at_call:
            raise JobCancelled("cancelled by the test")

    bundles = tmp_path / "bundles"
    with pytest.raises(JobCancelled):
        index_model(
            run_dir,
            PublishPlan(
                data=DataPlan(data_dir=str(slice_dir)),
                index=IndexPlan(kind="flat"),
                publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False),
            ),
            RunHooks(show_progress=False, checkpoint=checkpoint),
        )
    store = BundleStore(bundles)
    assert store.current_version() is None and store.list_versions() == []
    assert [p.name for p in bundles.iterdir() if p.name.startswith(".build-")] == []
    # calls: 1 queries, 2 the one chunk of documents (< 1,024), 3 build, 4 publish
    assert len(calls) == cancel_at_call


def test_encode_corpus_in_checkpointed_chunks_matches_one_call(shared_encoder, slice_dir, monkeypatch):
    import training.eval.evaluate as evaluate_module
    from training.data.beir import load_beir
    from training.eval.evaluate import encode_corpus

    corpus = load_beir(slice_dir, "test").corpus
    ids, whole = encode_corpus(shared_encoder, corpus, show_progress=False)
    monkeypatch.setattr(evaluate_module, "CHECKPOINT_DOCS", 32)
    calls = []
    ids2, chunked = encode_corpus(
        shared_encoder, corpus, show_progress=False, checkpoint=lambda: calls.append(1)
    )
    assert ids2 == ids and len(calls) == -(-len(corpus) // 32)
    np.testing.assert_allclose(chunked, whole, atol=1e-5)


def test_a_plan_refuses_bad_index_options_naming_them():
    """The plan validates the index options once, where it is built (the CLI, a job), not index_model."""
    with pytest.raises(ValidationError, match="kind"):
        IndexPlan(kind="annoy")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="target_recall"):
        IndexPlan(target_recall=1.5)


def test_cli_index_command(run_dir, demo_dataset, tmp_path):
    slice_dir = write_slice(demo_dataset, tmp_path / "tiny", n_queries=3, n_distractors=10)
    cmd = [
        sys.executable,
        "-m",
        "training",
        "index",
        "--model",
        str(run_dir),
        "--data",
        str(slice_dir),
        "--bundles",
        str(tmp_path / "b"),
        "--index",
        "flat",
        "--quiet",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    version = BundleStore(tmp_path / "b").current_version()
    assert version is not None and version in done.stdout and "live" in done.stdout
    bad = subprocess.run(
        [*cmd[:-3], "--index", "annoy"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    # the parser refuses it before any work, naming the option and the allowed kinds (training/cli/choices.py)
    assert bad.returncode == 2 and "'--index'" in bad.stderr and "'annoy' is not one of 'auto'" in bad.stderr
    assert "Traceback" not in bad.stderr
