"""The ONNX query encoder: same vectors as torch (fp32), quality recorded in the manifest, served by the API."""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.engine.encoder_choice import recorded_ndcg_losses
from app.main import create_app
from contract.encoding.onnx_encoder import EXTRAS_KEY, OnnxQueryEncoder
from contract.errors import ModelLoadError
from tests.app.conftest import make_settings
from training.export.onnx_export import export_onnx


def test_onnx_fp32_reproduces_torch_vectors_and_int8_stays_close(staged, shared_encoder, slice_data):
    texts = list(slice_data.queries.values()) + ["", "a " * 600]  # empty and over-long inputs too
    torch_vecs = shared_encoder.encode(texts, kind="query")  # (n, 384)
    fp32 = OnnxQueryEncoder.load(staged["A"] / "model", variant="fp32").encode(texts)
    int8 = OnnxQueryEncoder.load(staged["A"] / "model", variant="int8").encode(texts)
    assert fp32.shape == int8.shape == torch_vecs.shape
    np.testing.assert_allclose(np.linalg.norm(fp32, axis=1), 1.0, atol=1e-5)
    assert (fp32 * torch_vecs).sum(1).min() > 0.9999
    assert (int8 * torch_vecs).sum(1).min() > 0.95


def test_length_sorted_batches_keep_the_input_order(staged, slice_data):
    # encode sorts texts by length before batching; rows must come back in the caller's order
    texts = sorted(slice_data.queries.values())[:9] + ["short", "a much longer query " * 8]
    enc = OnnxQueryEncoder.load(staged["A"] / "model", variant="fp32")
    one_by_one = np.concatenate([enc.encode([t]) for t in texts])  # (n, 384), no padding at all
    np.testing.assert_allclose(enc.encode(texts, batch_size=3), one_by_one, atol=1e-5)
    np.testing.assert_allclose(enc.encode(texts, batch_size=64), one_by_one, atol=1e-5)


def test_the_pool_spins_during_a_run_and_stops_when_it_returns(staged):
    """Spinning between runs cost one process a core and a fifth of its throughput (bench/results/
    thread_cpu_spin_demo.txt); spinning off altogether doubled one query's latency. Both stay as chosen."""
    enc = OnnxQueryEncoder.load(staged["A"] / "model", variant="int8", threads=2)
    options = enc.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert options.get_session_config_entry("session.force_spinning_stop") == "1"
    assert enc.encode(["a query"]).shape == (1, enc.dim)


def test_bulk_batches_stay_under_the_token_cap_and_give_the_same_vectors(staged, slice_data, monkeypatch):
    """A bulk encode caps each batch at BATCH_TOKENS tokens (rows × its longest) and shrinks the arena after
    each run; a serving-sized call (up to BULK_TEXTS texts) passes no run options. Same vectors either way
    (oracle: one by one)."""
    from contract.encoding import onnx_encoder

    texts = sorted(slice_data.queries.values())[:12] + ["a much longer query " * 20, "short"]
    enc = OnnxQueryEncoder.load(staged["A"] / "model", variant="fp32")
    one_by_one = np.concatenate([enc.encode([t]) for t in texts])  # (n, 384)
    real, calls = enc.session, []

    class Recording:
        def run(self, names, feed, options=None):
            calls.append((feed["input_ids"].shape, options))
            return real.run(names, feed, options)

    monkeypatch.setattr(onnx_encoder, "BATCH_TOKENS", 64)
    real_bulk = onnx_encoder.BULK_TEXTS
    monkeypatch.setattr(onnx_encoder, "BULK_TEXTS", 8)  # these 14 texts are a bulk encode
    enc.session = Recording()
    np.testing.assert_allclose(enc.encode(texts, batch_size=8), one_by_one, atol=1e-5)
    assert all(rows == 1 or rows * width <= 64 for (rows, width), _ in calls)
    assert calls[0][0][0] == 1 and len(calls) > 2  # the longest alone; the short ones several to a batch
    assert all(options is not None for _, options in calls)
    calls.clear()
    enc.encode(["one query"])
    enc.encode(texts[:8])  # a micro-batch's size
    assert calls and all(options is None for _, options in calls)
    # the corpus-encoder race times the path the corpus encode runs: its probe is a bulk encode too
    from training.export.corpus_encoder import PROBE_DOCS

    assert real_bulk < PROBE_DOCS


def test_quality_is_recorded_in_the_manifest(staged):
    manifest = json.loads((staged["A"] / "manifest.json").read_text())
    record = manifest["extras"][EXTRAS_KEY]
    assert set(record["ndcg@10"]) == {"torch", "fp32", "int8"}
    assert abs(record["ndcg_loss"]["fp32"]) < 1e-3  # same vectors, same ranking
    for variant in ("fp32", "int8"):
        assert record["ndcg_loss"][variant] == pytest.approx(
            record["ndcg@10"]["torch"] - record["ndcg@10"][variant]
        )
        assert record["files"][variant] in manifest["files"]  # checksummed with the bundle


def test_recorded_losses_name_only_onnx_files_that_exist(tmp_path):
    """`auto`'s candidates (app/engine/encoder_choice.py): the recorded loss of each ONNX file on disk, torch always."""
    model = tmp_path / "model"
    (model / "onnx").mkdir(parents=True)
    (model / "onnx" / "model.onnx").write_bytes(b"x")  # fp32 only: int8 was recorded but is missing

    def bundle(extras):
        return SimpleNamespace(path=str(tmp_path), manifest=SimpleNamespace(extras=extras))

    rec = {EXTRAS_KEY: {"ndcg_loss": {"fp32": 0.0, "int8": 0.004}}}
    assert recorded_ndcg_losses(bundle(rec)) == {"torch": 0.0, "onnx": 0.0}
    (model / "onnx" / "model_int8.onnx").write_bytes(b"x")
    assert recorded_ndcg_losses(bundle(rec)) == {"torch": 0.0, "onnx": 0.0, "onnx-int8": 0.004}
    assert recorded_ndcg_losses(bundle({})) == {"torch": 0.0}  # never measured: torch only


def test_export_refuses_a_pipeline_it_cannot_reproduce(tmp_path, staged):
    model = tmp_path / "model"
    shutil.copytree(staged["A"] / "model", model, ignore=shutil.ignore_patterns("onnx", "*.safetensors"))
    modules = json.loads((model / "modules.json").read_text())
    (model / "modules.json").write_text(json.dumps(modules[:2]))  # no Normalize
    with pytest.raises(ModelLoadError, match="modules.json"):
        export_onnx(model)


@pytest.mark.parametrize("backend", ["onnx", "auto"])
def test_api_serves_with_the_onnx_encoder(
    live_bundles, staged, shared_encoder, slice_data, doc_embeddings, backend
):
    bundles, _ = live_bundles
    extras = json.loads((staged["A"] / "manifest.json").read_text())["extras"]
    losses = {"torch": 0.0, "onnx": extras[EXTRAS_KEY]["ndcg_loss"]["fp32"]}
    losses["onnx-int8"] = extras[EXTRAS_KEY]["ndcg_loss"]["int8"]
    with TestClient(
        create_app(make_settings(bundles, encoder_backend=backend, reload_poll_seconds=0))
    ) as client:
        listing = client.get("/bundles").json()
        expected = backend if backend != "auto" else listing["encoder_choice"]["chosen"]
        assert listing["encoder_backend"] == expected
        assert losses[expected] <= 0.005  # auto picks only within the default budget
        query = list(slice_data.queries.values())[4]
        hits = client.post("/search", json={"query": query, "top_k": 10}).json()["results"][0]["hits"]
    if expected in ("torch", "onnx"):  # identical query vectors: identical ranking and scores
        scores = doc_embeddings @ shared_encoder.encode([query], kind="query")[0]
        order = np.argsort(-scores, kind="stable")[:10]
        assert [h["id"] for h in hits] == [list(slice_data.corpus)[i] for i in order]
        np.testing.assert_allclose([h["score"] for h in hits], scores[order], atol=1e-4)
    else:
        assert len(hits) == 10


class Probe:
    """Stands in for the /proc/stat probe (tests/contract/test_spare_cores.py tests the real one)."""

    def __init__(self, spare: bool) -> None:
        self.answer, self.asked = spare, []

    def spare(self, threads: int) -> bool:
        self.asked.append(threads)
        return self.answer


def test_the_wide_session_runs_only_while_cores_are_spare_and_gives_the_same_vectors(staged, slice_data):
    """A worker's encoder on 1 thread keeps a 2-thread session for the idle-core case (contract/encoding/
    spare_cores.py); the runs it takes come out as the 1-thread session's (oracle: the narrow session)."""
    from contract.encoding.spare_cores import usage, widen

    texts = list(slice_data.queries.values())[:6]
    enc = OnnxQueryEncoder.load(staged["A"] / "model", variant="int8", threads=1)
    narrow = enc.encode(texts)  # (n, 384)
    widen(enc, threads=1, cores=1)  # nothing to widen into
    assert enc.wide is None and usage(enc)["threads"] == 0
    widen(enc, threads=1, cores=4)
    assert enc.wide is not None
    wide_session, threads, _ = enc.wide
    assert threads == 2 and wide_session.get_session_options().intra_op_num_threads == 2
    probe = Probe(spare=False)
    enc.wide = (wide_session, 2, probe)
    runs: list[object] = []
    for session in (enc.session, wide_session):
        real = session.run
        session.run = lambda *a, _real=real, _s=session: runs.append(_s) or _real(*a)
    np.testing.assert_allclose(enc.encode(texts), narrow, atol=1e-6)
    assert set(runs) == {enc.session} and probe.asked == [2]  # one choice a call
    runs.clear()
    probe.answer = True
    np.testing.assert_allclose(enc.encode(texts), narrow, atol=1e-5)
    assert set(runs) == {wide_session}
    assert usage(enc) == {"threads": 2, "calls": 3, "wide_calls": 1}


def test_get_bundles_shows_the_spare_core_session(live_bundles):
    """One encoder thread on a machine of more cores (each app.serve worker's plan): a second session of
    two threads, shown in GET /bundles with its calls and counted once more in the collections' memory;
    none when SEARCH_ENCODER_SPARE_CORES is off or threads fill the cores."""
    from app.engine.serving_plan import available_cores

    bundles, version = live_bundles
    base = make_settings(bundles, encoder_backend="onnx-int8", reload_poll_seconds=0, encoder_threads=1)
    expected = 2 if available_cores() >= 2 else 0
    resident = {}
    for settings, wide in (  # off first: a loaded model is shared, so a widened one stays wide in-process
        (base.model_copy(update={"encoder_spare_cores": False}), 0),
        (base.model_copy(update={"encoder_threads": available_cores()}), 0),
        (base, expected),
    ):
        app = create_app(settings)
        with TestClient(app) as client:
            assert client.post("/search", json={"query": "a query"}).status_code == 200
            serving = client.get("/bundles").json()["serving"]
            resident[wide] = app.state.collections.resident_bytes()
        assert serving["spare_cores"]["threads"] == wide and serving["pid"] == os.getpid()
        assert serving["spare_cores"]["calls"] >= (1 if wide else 0)
    model = (bundles / version / "model" / "onnx" / "model_int8.onnx").stat().st_size
    assert resident[expected] - resident[0] == (model if expected else 0)
