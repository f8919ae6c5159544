"""Query-side retrain (training/distill/query_retrain.py): a real slice of the demo dataset, the real small encoder, a real
FAISS bundle published by `index`, then a query tower trained for a few steps against it and published.

The document-encode guard (tests/doc_encode_guard.py) is on while the query-side version is built: any
document encode fails the run, so a passing run is a run that encoded no document.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import numpy as np
import pytest

from contract.bundles.bundle import load_bundle, read_manifest, validate
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.errors import BundleInvalid, ConfigError
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan, retrain_plan
from contract.mutations.rows import encoder_key
from contract.query_config import QueryRetrainConfig
from tests.doc_encode_guard import DocumentEncodeCalled, install
from training.bundle.store import BundleStore
from training.data.beir_slice import beir_slice
from training.train.run_hooks import RunHooks

# no validation carve: early stopping (its own test below) would keep the live tower after 3 steps
QUICK = TrainConfig(max_steps=3, eval_max_queries=10, seed=0, validation_fraction=0.0)
# a small lr: the tower moves but stays within the gate's tolerance (these tests are about the machinery)
TOWER = QueryRetrainConfig(query_batch_size=8, query_max_seq_length=32, query_lr=1e-5)
SHARED = ("index.faiss", "ids.json", "docs.sqlite")


@pytest.fixture(scope="module")
def world(demo_dataset, tmp_path_factory) -> dict[str, Any]:
    from training.publish.index_model import index_model
    from training.publish.pipeline import run_pipeline

    root = tmp_path_factory.mktemp("query-retrain")
    data = beir_slice(demo_dataset, root / "data", n_train=30, n_test=12, n_distractors=40)
    base = Encoder.load()
    base.model.max_seq_length = 32  # every encode in these tests stays cheap
    base.save(root / "base")
    first = index_model(
        root / "base",
        PublishPlan(
            data=DataPlan(data_dir=str(data)),
            index=IndexPlan(kind="flat"),
            publication=PublicationPlan(bundles_dir=str(root / "bundles"), onnx=False, distill=False),
        ),
        RunHooks(show_progress=False),
    )
    assert first.live
    uninstall = install()
    try:
        result = run_pipeline(
            retrain_plan(
                QUICK,
                TOWER,
                PublishPlan(
                    data=DataPlan(data_dir=str(data)),
                    publication=PublicationPlan(bundles_dir=str(root / "bundles"), onnx=False, distill=False),
                ),
                "query",
            ),
            root / "runs",
            RunHooks(show_progress=False),
        )
    finally:
        uninstall()
    return {
        "root": root,
        "data": data,
        "parent": first.version,
        "result": result,
        "bundles": root / "bundles",
    }


def test_the_query_side_version_goes_live_sharing_the_parents_files(world):
    result, bundles, parent = world["result"], world["bundles"], world["parent"]
    assert result.scope == "query" and result.publish.live, result.publish.reason
    child = result.publish.version
    assert BundleStore(bundles).current_version() == child
    parent_m, child_m = read_manifest(bundles / parent), read_manifest(bundles / child)
    lexical = [rel for rel in parent_m.files if rel.startswith("lexical/")]
    assert lexical  # the parent has a BM25 index, and it is shared too
    for rel in (*SHARED, *lexical):
        a, b = os.stat(bundles / parent / rel), os.stat(bundles / child / rel)
        assert (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev), rel  # one file, two versions
        assert child_m.files[rel] == parent_m.files[rel]  # and still listed with its checksum
    # the parent's whole model folder is the child's document tower, byte for byte (the same inodes)
    for rel, digest in parent_m.files.items():
        if rel.startswith("model/"):
            twin = "model/document/" + rel.removeprefix("model/")
            assert child_m.files[twin] == digest
            assert os.stat(bundles / parent / rel).st_ino == os.stat(bundles / child / twin).st_ino
    record = child_m.extras["query_retrain"]
    assert record["parent"] == parent and record["documents_encoded"] == 0
    assert record["steps"] == QUICK.max_steps and record["query_tower"] == "lora"
    validate(bundles / child)  # every checksum, shared files included


def test_the_document_tower_is_the_parents_and_the_query_tower_changed(world, base_encoder):
    bundles, parent, child = world["bundles"], world["parent"], world["result"].publish.version
    old, new = Encoder.load(bundles / parent / "model"), Encoder.load(bundles / child / "model")
    assert new.two_towers and not old.two_towers
    texts = ["Vitamin D supplementation and bone density.", "Statins cause muscle pain in some patients."]
    np.testing.assert_allclose(
        new.encode(texts, kind="document"), old.encode(texts, kind="document"), atol=1e-6
    )
    assert not np.allclose(new.encode(texts, kind="query"), old.encode(texts, kind="query"), atol=1e-6)
    # the mutation log's vectors stay valid: the documents' encoder has the parent's identity
    files = {p: read_manifest(bundles / v).files for p, v in (("p", parent), ("c", child))}
    assert encoder_key(files["p"]) == encoder_key(files["c"])


def test_its_report_scores_the_query_tower_against_the_fixed_documents(world):
    bundles, child = world["bundles"], world["result"].publish.version
    report = json.loads((bundles / child / "report" / "report.json").read_text())
    assert report["towers"]["query"].startswith("tuned query tower")
    assert "fixed document embeddings" in report["towers"]["documents"]
    assert any("fixed document embeddings" in note for note in report["notes"])
    assert report["k"] >= QUICK.max_steps and report["risk_test"]["kind"] == "estimate"


def test_its_report_is_query_gap_report_so_held_out_splits_are_measured_the_same_way(world):
    """bench/gap/predictive_validity.py --tower query measures unseen queries with query_gap_report: recomputed
    from the published tower, the parent's fixed vectors and the report's k, it gives the published risks."""
    from training.data.split import load_split
    from training.distill.query_report import ReportedRetrain, query_gap_report

    bundles, parent, child = world["bundles"], world["parent"], world["result"].publish.version
    published = json.loads((bundles / child / "report" / "report.json").read_text())
    live = load_bundle(bundles / parent, verify=False, mmap=True)
    try:
        again = query_gap_report(
            Encoder.load(bundles / child / "model"), load_split(world["data"], "train"),
            load_split(world["data"], "test"), published["k"], ReportedRetrain(live, parent, TOWER, QUICK),
        )  # fmt: skip
    finally:
        live.docstore.close()
    for key in ("risk_test", "risk_train", "ce_inf_plugin"):
        assert getattr(again, key).value == pytest.approx(published[key]["value"], abs=1e-9), key
    assert again.pool_size == published["pool_size"] and again.towers is not None


def test_rollback_to_the_parent_and_forward_again(world, tmp_path):
    bundles = tmp_path / "bundles"
    # a private copy for the damage below (the other tests read the original); cp -a keeps hard links
    subprocess.run(["cp", "-a", str(world["bundles"]), str(bundles)], check=True)
    assert os.stat(bundles / world["parent"] / "ids.json").st_nlink == 2
    store = BundleStore(bundles)
    parent, child = world["parent"], world["result"].publish.version
    store.activate(parent)
    assert store.current_version() == parent
    assert load_bundle(bundles / parent).encoder.two_towers is False
    store.activate(child)
    assert store.current_version() == child
    assert load_bundle(bundles / child).encoder.two_towers
    # a shared file damaged after publication fails both versions' checksums: nothing is trusted blindly
    with open(bundles / child / "ids.json", "r+b") as f:
        f.seek(2)
        f.write(b"#")
    for version in (parent, child):
        with pytest.raises(BundleInvalid, match="checksum"):
            validate(bundles / version)


def test_a_query_side_retrain_needs_the_live_documents(world, tmp_path):
    from training.publish.pipeline import resolve_scope

    changed = tmp_path / "changed"
    shutil.copytree(world["data"], changed)
    lines = (changed / "corpus.jsonl").read_text().splitlines()
    doc = json.loads(lines[0])
    lines[0] = json.dumps(doc | {"text": doc["text"] + " Revised."})
    (changed / "corpus.jsonl").write_text("\n".join(lines) + "\n")

    def auto(data: Any, bundles: Any) -> Any:
        publish = PublishPlan(
            data=DataPlan(data_dir=str(data)), publication=PublicationPlan(bundles_dir=str(bundles))
        )
        return resolve_scope(retrain_plan(QUICK, QueryRetrainConfig(), publish, "auto"))

    plan = auto(changed, world["bundles"])
    assert plan.scope == "full" and doc["_id"] in plan.scope_reason
    # this world's live documents were encoded by the base model (its parent is a bare index): `auto` runs full
    plan = auto(world["data"], world["bundles"])
    assert plan.scope == "full" and "base model" in plan.scope_reason and plan.live_eligible
    assert auto(world["data"], tmp_path / "empty").scope == "full"
    from training.distill.query_retrain import query_side_retrain

    with pytest.raises(ConfigError, match="--retrain-scope query: .*changed"):
        query_side_retrain(
            retrain_plan(
                QUICK,
                TOWER,
                PublishPlan(
                    data=DataPlan(data_dir=str(changed)),
                    publication=PublicationPlan(bundles_dir=str(world["bundles"]), distill=False),
                ),
                "query",
            ),
            tmp_path / "r",
        )


def test_auto_takes_the_query_side_only_over_adapted_documents(world, tmp_path):
    """The query side keeps the documents; `auto` chooses it only when a run adapted them (issue 40)."""
    from training.publish.pipeline import resolve_scope

    bundles = tmp_path / "bundles"
    shutil.copytree(world["bundles"], bundles, symlinks=True)
    child = world["result"].publish.version
    publish = PublishPlan(
        data=DataPlan(data_dir=str(world["data"])), publication=PublicationPlan(bundles_dir=str(bundles))
    )

    def scope_with(record: dict[str, Any]) -> tuple[str, str]:
        path = bundles / child / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["extras"]["query_retrain"] = record
        path.write_text(json.dumps(manifest))  # the manifest is not under its own checksums
        plan = resolve_scope(retrain_plan(QUICK, QueryRetrainConfig(), publish, "auto"))
        return plan.scope, plan.scope_reason

    record = read_manifest(world["bundles"] / child).extras["query_retrain"]
    assert record["documents_adapted"] is False  # its parent is the base model's index
    assert scope_with(record | {"documents_adapted": True}) == (
        "query",
        "the live bundle holds this dataset's documents unchanged",
    )
    older = {
        k: v for k, v in record.items() if k != "documents_adapted"
    }  # a record from before: ask the parent
    scope, reason = scope_with(older)
    assert scope == "full" and "base model" in reason
    parent = json.loads((bundles / world["parent"] / "manifest.json").read_text())
    parent["training_config"] = {"config": QUICK.model_dump(mode="json")}  # as if a run had trained it
    (bundles / world["parent"] / "manifest.json").write_text(json.dumps(parent))
    assert scope_with(older)[0] == "query"


def test_the_guard_catches_a_corpus_encode(world, tmp_path):
    """The guard the query-side run passed under does fire on a build that encodes documents."""
    from training.publish.index_model import index_model

    uninstall = install()
    try:
        with pytest.raises(DocumentEncodeCalled):
            index_model(
                world["root"] / "base",
                PublishPlan(
                    data=DataPlan(data_dir=str(world["data"])),
                    index=IndexPlan(kind="flat"),
                    publication=PublicationPlan(bundles_dir=str(tmp_path / "b"), onnx=False, distill=False),
                ),
                RunHooks(show_progress=False),
            )
    finally:
        uninstall()


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf", "ivfpq"])
def test_fixed_vectors_are_the_rows_the_index_searches(kind):
    """Oracle: the vectors given to the index come back exactly, for every kind the project builds."""
    from training.distill.query_tower import fixed_vectors
    from training.export.index_factory import build_index

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(600, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = build_index(vectors, metric="ip", kind=kind, target_recall=0.5)
    positions = [0, 599, 17, 17, 300]
    np.testing.assert_allclose(fixed_vectors(index, positions), vectors[positions], atol=1e-6)


def test_training_stops_early_and_keeps_the_best_weights(base_encoder):
    """A validation score that only falls after the start: patience 2 stops the loop at the second check
    and puts the starting weights back."""
    import torch

    from training.distill.pairs import DistillPairs
    from training.distill.query_loop import FixedDocs, LoopControl, TowerTargets, fit_query_tower
    from training.distill.query_tower import QueryTower

    model = base_encoder.model
    start = [p.detach().clone() for p in model.parameters()]
    texts = [f"query number {i} about topic {i % 5}" for i in range(16)]
    pairs = DistillPairs(
        texts, list(range(16)), [f"q{i}" for i in range(16)], {f"q{i}": {i} for i in range(16)}
    )
    docs = FixedDocs(torch.nn.functional.normalize(torch.randn(16, 384), dim=-1), {i: i for i in range(16)})
    scores = iter([0.5, 0.4, 0.3, 0.2, 0.1])
    config = QueryRetrainConfig(query_batch_size=4, query_eval_every=1, query_patience=2, query_lr=1e-3)
    tower = QueryTower(model, [p for p in model.parameters() if p.requires_grad])
    loop = fit_query_tower(tower, TowerTargets(pairs, docs, [[] for _ in texts]), temperature=0.05,
                           config=config, control=LoopControl(0, validate=lambda: next(scores)))  # fmt: skip
    assert loop.stopped_early and loop.steps == 2 and loop.best_step == 0
    assert [c["step"] for c in loop.curve] == [0, 1, 2]
    for p, p0 in zip(model.parameters(), start, strict=True):  # the two steps did move them; now back
        torch.testing.assert_close(p.detach(), p0)


def test_a_full_retrain_over_the_live_documents_encodes_the_corpus_once(world, tmp_path, monkeypatch):
    """The live bundle's vectors are the "before" evaluation and the mining ranking: the corpus is encoded
    once, by the tuned model (whose vectors the index then reuses)."""
    from training.publish.pipeline import run_pipeline

    bundles = tmp_path / "bundles"
    subprocess.run(["cp", "-a", str(world["bundles"]), str(bundles)], check=True)
    encoded: list[int] = []
    original = Encoder.encode

    def counting(self: Encoder, texts: Any, *, kind: str = "document", **kwargs: Any) -> Any:
        if kind == "document":
            encoded.append(len(texts))
        return original(self, texts, kind=kind, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Encoder, "encode", counting)
    config = TrainConfig(
        max_steps=1, batch_size=4, max_seq_length=32, lr=1e-7, eval_max_queries=8, report=False
    )
    result = run_pipeline(
        retrain_plan(
            config,
            QueryRetrainConfig(),
            PublishPlan(
                data=DataPlan(data_dir=str(world["data"])),
                publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False),
            ),
            "full",
        ),
        tmp_path / "runs",
        RunHooks(show_progress=False),
    )
    n_docs = len(json.loads((bundles / world["parent"] / "ids.json").read_text()))
    assert result.scope == "full"
    assert sum(encoded) == n_docs, encoded  # one corpus encode, not two
    assert "encode + evaluate (base)" not in result.timer.seconds
    metrics = json.loads(result.train.metrics_path.read_text())
    assert metrics["base_is"] == f"live bundle {BundleStore(world['bundles']).current_version()}"


def test_the_corpus_encoder_choice_gates_onnx_on_ndcg(world, tmp_path):
    from training.data.split import load_split
    from training.export.corpus_encoder import OnnxCorpusEncoder, choose_corpus_encoder

    model_dir = tmp_path / "model"
    shutil.copytree(world["root"] / "base", model_dir)
    encoder = Encoder.load(model_dir)
    data = load_split(world["data"], "test")
    same, record = choose_corpus_encoder(encoder, model_dir, data)  # a small corpus stays on torch
    assert same is encoder and record["chosen"] == "torch"
    forced, record = choose_corpus_encoder(encoder, model_dir, data, choice="onnx")
    assert isinstance(forced, OnnxCorpusEncoder) and record["chosen"] == "onnx"
    texts = [d.text for d in list(data.corpus.values())[:6]]
    cosine = (forced.encode(texts, kind="document") * encoder.encode(texts, kind="document")).sum(1)
    assert cosine.min() > 0.9999  # fp32 ONNX is torch's encoder
    np.testing.assert_array_equal(
        forced.encode(texts[:2], kind="query"), encoder.encode(texts[:2], kind="query")
    )


def test_auto_takes_the_fastest_runtime_within_the_ndcg_budget(world, tmp_path, monkeypatch):
    from training.data.split import load_split
    from training.export import corpus_encoder as ce

    model_dir = tmp_path / "model"
    shutil.copytree(world["root"] / "base", model_dir)
    monkeypatch.setattr(ce, "MIN_DOCS", 10)  # probe even this small corpus
    monkeypatch.setattr(ce, "PROBE_DOCS", 40)
    chosen, record = ce.choose_corpus_encoder(
        Encoder.load(model_dir), model_dir, load_split(world["data"], "test")
    )
    rows = record["candidates"]
    assert set(rows) == {"torch", "onnx", "onnx-int8"}  # int8 raced on every CPU, VNNI or not
    pick = rows[record["chosen"]]
    assert pick["ndcg_loss"] <= ce.MAX_NDCG_LOSS
    assert record["chosen"] == "torch" or pick["speedup"] >= ce.MIN_SPEEDUP
    faster_eligible = [
        r for r in rows.values() if r["ndcg_loss"] <= ce.MAX_NDCG_LOSS and r["speedup"] >= ce.MIN_SPEEDUP
    ]
    assert pick["docs_per_s"] >= max(
        [r["docs_per_s"] for r in faster_eligible] + [rows["torch"]["docs_per_s"]]
    )
    assert (record["chosen"] == "torch") == (
        chosen.documents is chosen and not isinstance(chosen, ce.OnnxCorpusEncoder)
    )


def test_train_tower_query_writes_a_two_tower_model_and_publishes_nothing(world, tmp_path):
    import sys

    bundles = world["bundles"]
    before = sorted(p.name for p in bundles.iterdir())
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "training", "train", "--data", str(world["data"]), "--out", str(out),
         "--retrain-scope", "query", "--bundles", str(bundles), "--max-steps", "1", "--query-batch-size", "8",
         "--validation-fraction", "0", "--no-report", "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "query tower vs the live bundle" in done.stdout
    assert Encoder.load(out / "model").two_towers
    assert json.loads((out / "metrics.json").read_text())["base_is"].startswith("live bundle")
    assert sorted(p.name for p in bundles.iterdir()) == before  # nothing published
    missing = subprocess.run(
        [sys.executable, "-m", "training", "train", "--data", str(world["data"]), "--out", str(out),
         "--tower", "query"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # `--tower`, the scope's old name, is still taken (and called deprecated)
    assert missing.returncode != 0 and "--retrain-scope query needs --bundles" in missing.stderr
    assert "`tower` option is deprecated" in missing.stderr


def test_one_seed_gives_one_lora_tower_whatever_the_process_drew_before():
    import torch

    from contract.encoding.encoder import default_model_path
    from training.distill.query_tower import query_tower

    config = QueryRetrainConfig(query_tower="lora", query_lora_rank=4)

    def adapters(seed: int | None) -> list[torch.Tensor]:
        torch.rand(1000)  # a draw before: a worker's earlier jobs
        tower = query_tower(default_model_path(), config, seed=seed)
        return [p.detach().clone() for p in tower.params]

    first, again, other = adapters(0), adapters(0), adapters(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
