"""A tiny real fine-tuning run on a slice of the demo dataset: artifacts, reload, logged loss, progress, cancel."""

from __future__ import annotations

import json
import math

import pytest
import torch

from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from training.data.beir_slice import beir_slice
from training.gap.training_k import training_k
from training.train.run_hooks import RunHooks
from training.train.trainer import train


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # Two OpenMP threads stall whenever another job holds a core of this shared 2-core box.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def slice_dir(demo_dataset, tmp_path_factory):
    return beir_slice(demo_dataset, tmp_path_factory.mktemp("slice"), n_distractors=24)


def test_tiny_run_writes_artifacts_and_the_model_reloads(slice_dir, tmp_path):
    # Given: 16 training queries, 3 steps, learned τ, mined and random negatives, short inputs
    config = TrainConfig(
        max_seq_length=64,
        batch_size=8,
        max_steps=3,
        learn_temperature=True,
        hard_negatives=1,
        hard_negative_rank_min=0,
        random_negatives=2,
        eval_max_queries=6,
        report=False,
        corpus_title_pairs=5,
    )
    progress: list[dict] = []
    # When
    result = train(
        config, slice_dir, tmp_path / "run", hooks=RunHooks(on_progress=progress.append, show_progress=False)
    )
    # Then: every artifact is there and consistent
    out = tmp_path / "run"
    assert result.model_dir == out / "model" and not (out / "model.partial").exists()
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"base", "base_is", "tuned", "train_seconds", "validation", "by_mode"}
    assert metrics["train_seconds"] > 0
    # every retrieval mode, base and tuned; dense is the same evaluation as "base" / "tuned"
    for side in ("base", "tuned"):
        by_mode = metrics["by_mode"][side]
        assert by_mode["dense"]["ndcg@10"] == pytest.approx(metrics[side]["ndcg@10"], abs=1e-6)
        assert (
            by_mode["default_mode"] in ("dense", "lexical", "hybrid")
            and by_mode["validation"]["n_queries"] == 3
        )
    assert metrics["by_mode"]["base"]["lexical"] == metrics["by_mode"]["tuned"]["lexical"]  # BM25: no model
    # the carved validation queries: held out of training, scored by base and tuned model alike
    n_val = metrics["validation"]["tuned"]["n_queries"]
    assert n_val == metrics["validation"]["base"]["n_queries"] == round(0.2 * 16)
    assert result.validation_metrics == metrics["validation"]
    for side in ("base", "tuned"):
        assert 0.0 <= metrics[side]["ndcg@10"] <= 1.0 and metrics[side]["n_queries"] == 6
    assert metrics["tuned"]["ndcg@10"] == pytest.approx(result.tuned_metrics["ndcg@10"])
    saved = json.loads((out / "config.json").read_text())
    assert TrainConfig(**saved["config"]) == config
    assert saved["data"]["source"] == str(slice_dir) and saved["data"]["n_corpus_title_pairs"] == 5
    assert saved["data"]["n_train_pairs"] >= 16 - n_val + 5  # the title pairs joined the labelled ones
    assert saved["versions"]["torch"] and saved["base_model"]["name"] == "all-MiniLM-L6-v2"

    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in log) and len({r["loss"] for r in log}) == 3
    assert any(r["n_extra_negatives"] > 2 for r in log)  # mined negatives joined the random ones
    # the k a row saw: in-batch + shared extras; deduplicated mined ones keep it at or under the config's bound
    assert all(1 <= r["n_negatives"] - r["n_extra_negatives"] <= 8 - 1 for r in log)  # in-batch part
    assert all(r["n_negatives"] <= training_k(config) for r in log)
    assert [p["step"] for p in progress] == [1, 2, 3] and progress[-1]["eta_s"] == 0
    assert all(p["total_steps"] == 3 for p in progress)

    # The saved model reloads with the learned τ in similarity.json, and encodes like the tuned model
    reloaded = Encoder.load(out / "model")
    assert reloaded.metric == "cosine"
    assert reloaded.similarity.temperature == pytest.approx(log[-1]["temperature"], rel=1e-6)
    assert reloaded.similarity.temperature != pytest.approx(0.05, rel=1e-4)  # τ was learned
    assert reloaded.model.max_seq_length == 256  # training truncation does not leak into serving
    base = Encoder.load()
    text = ["Statins increase the risk of diabetes."]
    assert not torch.allclose(torch.from_numpy(reloaded.encode(text)), torch.from_numpy(base.encode(text)))


def test_aninfonce_with_grad_cache_can_be_cancelled_from_on_progress(slice_dir, tmp_path):
    class Cancelled(Exception):
        pass

    def cancel(event: dict) -> None:
        assert event["step"] == 1 and math.isfinite(event["loss"]) and event["temperature"] > 0
        raise Cancelled

    config = TrainConfig(
        loss="aninfonce",
        grad_cache=True,
        mini_batch_size=3,
        max_seq_length=32,
        batch_size=6,
        eval_max_queries=2,
        report=False,
    )
    with pytest.raises(Cancelled):
        train(config, slice_dir, tmp_path / "run", hooks=RunHooks(on_progress=cancel, show_progress=False))
    assert not (tmp_path / "run" / "model").exists() and not (tmp_path / "run" / "metrics.json").exists()


def test_shared_extra_negatives_are_never_a_positive_of_any_batch_query():
    import numpy as np

    from training.data.retrieval_data import Pair
    from training.train.examples import extra_negatives as _extra_negatives
    from training.train.step import linear_schedule

    # Given: q0's mined negative (doc 3) is a labelled positive of q1, who is in the same batch
    pairs = [Pair("a", "A", query_id="q0", positive_id="d0"), Pair("b", "B", query_id="q1", positive_id="d1")]
    position = {f"d{i}": i for i in range(8)}
    known = {"q0": {0}, "q1": {1, 3}}
    mined = [[3, 4], [4, 5]]
    config = TrainConfig(random_negatives=3)
    for seed in range(20):
        extra = _extra_negatives(
            [0, 1], pairs, mined, known, position, 8, config, np.random.default_rng(seed)
        )
        # Then: doc 3 and both positives are excluded, the duplicate 4 appears once, 3 random ones added
        assert {0, 1, 3}.isdisjoint(extra) and len(extra) == len(set(extra)) == 5
        assert extra[:2] == [4, 5]
    # warmup rises linearly, decay reaches 0 at the last step
    assert [round(linear_schedule(s, 2, 6), 3) for s in range(6)] == [0.333, 0.667, 1.0, 0.75, 0.5, 0.25]


def test_title_pairs_are_seeded_titles_querying_their_own_body_without_the_title():
    import numpy as np

    from training.data.retrieval_data import Document, RetrievalData
    from training.train.examples import title_pairs

    # Given: 6 documents, one without a title and one without a body; q0 is a real query
    docs = [Document(f"d{i}", f"Title {i}", f"Body {i}.", {}) for i in range(6)]
    docs[1] = Document("d1", " ", "Body 1.", {})
    docs[2] = Document("d2", "Title 2", "", {})
    data = RetrievalData({d.id: d for d in docs}, {"q0": "a claim"}, {"q0": {"d0": 1}}, "mem")
    # When: more pairs asked for than eligible documents
    pairs = title_pairs(data, 10, np.random.default_rng(0))
    # Then: every titled document with a body, once; query = title, positive = body only
    assert [p.positive_id for p in pairs] == ["d0", "d3", "d4", "d5"]
    for p in pairs:
        n = p.positive_id[1:]
        assert (p.query, p.positive, p.query_id) == (f"Title {n}", f"Body {n}.", f"title:d{n}")
    # a smaller sample is seeded, without repeats, and n=0 adds nothing
    two = [p.positive_id for p in title_pairs(data, 2, np.random.default_rng(3))]
    assert two == [p.positive_id for p in title_pairs(data, 2, np.random.default_rng(3))]
    assert len(set(two)) == 2 and set(two) <= {"d0", "d3", "d4", "d5"}
    assert title_pairs(data, 0, np.random.default_rng(0)) == []
    # a pseudo-query id that collides with a real query id is refused, naming the option
    clash = RetrievalData(data.corpus, {"title:d0": "x"}, {"title:d0": {"d0": 1}}, "mem")
    with pytest.raises(ValueError, match="corpus_title_pairs"):
        title_pairs(clash, 10, np.random.default_rng(0))
