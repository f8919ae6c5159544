"""The mutation overlay against a numpy oracle: tombstones via FAISS's id selector (k stays full, for
exact and ANN indexes), a delta index merged by score, filters over new metadata, idempotent replay."""

from __future__ import annotations

import numpy as np
import pytest

from contract.index.docstore import DocStore, write_docstore
from contract.mutations.log import Mutation
from contract.mutations.overlay import Overlay
from training.data.retrieval_data import Document
from training.export.index_factory import build_index

N, D = 600, 16


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.normal(size=(n, D))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[np.ndarray, list[str], DocStore]:
    rng = np.random.default_rng(0)
    x = _unit(rng, N)
    ids = [f"d{i}" for i in range(N)]
    path = tmp_path_factory.mktemp("overlay") / "docs.sqlite"
    write_docstore(path, (Document(i, "", f"text {i}", {"g": n % 3}) for n, i in enumerate(ids)))
    return x, ids, DocStore(path)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_deleted_rows_never_return_and_k_stays_full(corpus, kind):
    x, ids, store = corpus
    index = build_index(x, metric="ip", kind=kind)
    q = _unit(np.random.default_rng(1), 5)
    top = index.search(q, 10)
    dead = np.unique(np.concatenate([p[:6] for p, _ in top]))  # each query's best six are deleted
    found = index.search(q, 10, excluded=dead)
    for i, (pos, _) in enumerate(found):
        assert len(pos) == 10 and not np.isin(pos, dead).any()
        if kind == "flat":  # exact: the next best rows, in order
            want = np.argsort(-(x @ q[i]))
            want = want[~np.isin(want, dead)][:10]
            assert pos.tolist() == want.tolist()


def _upsert(seq: int, doc_id: str, g: int) -> Mutation:
    return Mutation(seq=seq, op="upsert", doc_id=doc_id, text=f"new {doc_id}", metadata={"g": g})


def test_overlay_matches_brute_force_and_replay_is_idempotent(corpus):
    x, ids, store = corpus
    rng = np.random.default_rng(2)
    overlay = Overlay(build_index(x, metric="ip", kind="flat"), ids, store, base_seq=3, key="k")
    docs = {d: (x[i], i % 3) for i, d in enumerate(ids)}
    entries, vectors = [], {}
    for seq in range(4, 60):
        if seq % 4 == 0:
            doc_id = ids[int(rng.integers(N))]
            entries.append(Mutation(seq=seq, op="delete", doc_id=doc_id))
            docs.pop(doc_id, None)
        else:
            doc_id = ids[int(rng.integers(N))] if seq % 2 else f"n{int(rng.integers(20))}"
            g = int(rng.integers(4))
            entries.append(_upsert(seq, doc_id, g))
            vectors[seq] = _unit(rng, 1)[0]
            docs[doc_id] = (vectors[seq], g)
    old = Mutation(seq=2, op="delete", doc_id=ids[0])  # at or below the bundle's seq: already folded in
    assert overlay.apply([old, *entries[:20]], vectors) == 20
    assert overlay.apply(entries, vectors) == len(entries) - 20  # a replay applies only what is new
    assert overlay.apply(entries, vectors) == 0 and overlay.seq == 59
    names = sorted(docs)
    matrix = np.stack([docs[n][0] for n in names])
    for q in _unit(rng, 6):
        for flt, groups in ((None, {0, 1, 2, 3}), ({"g": 3}, {3}), ({"g": {"in": [0, 1]}}, {0, 1})):
            allowed = [i for i, n in enumerate(names) if docs[n][1] in groups]
            scores = matrix[allowed] @ q
            want = [names[allowed[i]] for i in np.argsort(-scores)[:10]]
            [(keys, got_scores)] = overlay.search(q[None], 10, filter_=flt)
            assert [overlay.doc_id(int(k)) for k in keys] == want
            assert np.allclose(got_scores, np.sort(scores)[::-1][:10], atol=1e-5)
    for n in list(docs)[:20]:
        assert overlay.exists(n)
        assert overlay.get(n)["metadata"]["g"] == docs[n][1]
    gone = [d for d in ids if d not in docs]
    assert gone and not any(overlay.exists(d) for d in gone) and overlay.get(gone[0]) is None


def test_l2_overlay_scores_are_the_learned_similarity(corpus):
    x, ids, store = corpus
    overlay = Overlay(build_index(x, metric="l2", kind="flat"), ids, store, base_seq=0, key="k")
    v = x[0] * 0.5
    overlay.apply([_upsert(1, "half", 0)], {1: v})
    [(keys, scores)] = overlay.search(v[None], 1)
    assert overlay.doc_id(int(keys[0])) == "half" and scores[0] == pytest.approx(0.0, abs=1e-6)
    [(keys, scores)] = overlay.search(x[0][None], 2)
    assert overlay.doc_id(int(keys[0])) == "d0"
    assert scores[1] == pytest.approx(-0.5 * float(np.sum((x[0] - v) ** 2)), rel=1e-4)


# -- issue 27, item 11: the lexical delta -----------------------------------------------------------------
LEXICAL_TEXTS = [
    "Vitamin D deficiency and bone density in older adults",
    "Bone marrow stromal cells differentiate into osteoblasts",
    "Zinc supplementation and the common cold: a randomised trial",
    "Density functional theory of vitamin molecules",
    "Cells, cells and more cells: counting with flow cytometry",
]
LEXICAL_QUERIES = ["vitamin d bone", "cells", "zinc cold trial", "density", "nothing matches here"]


def test_the_lexical_delta_scores_a_copy_of_a_bundle_document_as_the_bundle_does():
    """Oracle: bm25s's own scores. A delta document with a bundle document's text gets that document's
    score, because it is scored with the bundle's N, df and avgdl."""
    from contract.mutations.delta_lexical import DeltaLexical
    from training.hybrid.bm25_build import lexical_index

    lex = lexical_index(LEXICAL_TEXTS)
    delta = DeltaLexical(lex, avgdl=lambda: pytest.fail("lexical.json records avgdl"))
    for slot, text in enumerate(LEXICAL_TEXTS):
        delta.add(slot, text)
    for query in LEXICAL_QUERIES:
        np.testing.assert_allclose(
            delta.scores(query, range(len(LEXICAL_TEXTS))), lex.scores(query), rtol=1e-5
        )
        (keys, scores), (positions, want) = delta.search([query], 3)[0], lex.search([query], 3)[0]
        assert (-(keys + 1)).tolist() == positions.tolist()
        np.testing.assert_allclose(scores, want, rtol=1e-5)


def test_an_overlay_finds_writes_lexically_and_forgets_deletes(tmp_path):
    """Lexical search over bundle + overlay: a new document is found by its words at once, a replaced one
    by its new words only, a deleted one never; filters apply to it; a bundle whose lexical.json predates
    avgdl gets it from its document store, with the same value."""
    from training.hybrid.bm25_build import lexical_index

    lex = lexical_index(LEXICAL_TEXTS)
    recorded = lex.params.pop("avgdl")  # as in a bundle built before the lexical delta
    path = tmp_path / "docs.sqlite"
    write_docstore(path, (Document(f"b{i}", "", t, {"g": i % 2}) for i, t in enumerate(LEXICAL_TEXTS)))
    x = _unit(np.random.default_rng(3), len(LEXICAL_TEXTS))
    ids = [f"b{i}" for i in range(len(LEXICAL_TEXTS))]
    overlay = Overlay(build_index(x, metric="ip", kind="flat"), ids, DocStore(path), base_seq=0, key="k",
                      lexical=lex)  # fmt: skip
    new = Mutation(seq=1, op="upsert", doc_id="n1", title="zebra marmalade", text="quince", metadata={"g": 7})
    overlay.apply([new], {1: x[0]})
    assert overlay._lexical_delta is not None and overlay._lexical_delta.avgdl == pytest.approx(recorded)
    keys, _ = overlay.lexical_search(["zebra marmalade"], 3)[0]
    assert [overlay.doc_id(int(k)) for k in keys] == ["n1"]
    assert overlay.lexical_search(["zebra"], 3, scope=overlay.scope({"g": 0}))[0][0].tolist() == []
    assert len(overlay.lexical_search(["zebra"], 3, scope=overlay.scope({"g": 7}))[0][0]) == 1
    replaced = Mutation(seq=2, op="upsert", doc_id="n1", text="flow cytometry", metadata={"g": 7})
    deleted = Mutation(seq=3, op="delete", doc_id="b4")
    overlay.apply([replaced, deleted], {2: x[1]})
    assert overlay.lexical_search(["zebra marmalade"], 3)[0][0].tolist() == []
    keys, _ = overlay.lexical_search(["cytometry"], 3)[0]
    assert [overlay.doc_id(int(k)) for k in keys] == ["n1"]  # b4 held that word too, and is deleted
    overlay.apply([Mutation(seq=4, op="delete", doc_id="n1")], {})
    assert overlay.lexical_search(["cytometry"], 3)[0][0].tolist() == []
