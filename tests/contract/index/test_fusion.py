"""RRF and convex fusion against rankings computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from contract.index.fusion import FusionParams, convex, fuse, min_max, rrf


def ranking(pairs: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([p for p, _ in pairs], dtype=np.int64), np.array([s for _, s in pairs], dtype=np.float32)


DENSE = ranking([(7, 0.9), (3, 0.8), (5, 0.5), (1, 0.4)])
LEXICAL = ranking([(5, 12.0), (2, 9.0), (7, 3.0)])


def test_rrf_by_hand():
    # rrf_k = 1: 7 -> 1/2 + 1/4 = .75; 5 -> 1/4 + 1/2 = .75; 3 -> 1/3; 2 -> 1/3; 1 -> 1/5
    pos, sc = rrf(DENSE, LEXICAL, rrf_k=1)
    assert pos.tolist() == [5, 7, 2, 3, 1]  # equal scores: lower position first
    np.testing.assert_allclose(sc, [0.75, 0.75, 1 / 3, 1 / 3, 0.2], rtol=1e-6)
    # rrf_k = 60 keeps the same order here; top_k cuts
    pos, sc = rrf(DENSE, LEXICAL, rrf_k=60, top_k=2)
    assert pos.tolist() == [5, 7] and sc[0] == pytest.approx(1 / 61 + 1 / 63)


def test_convex_by_hand():
    # dense min-max over [.9,.8,.5,.4]: 7 -> 1, 3 -> .8, 5 -> .2, 1 -> 0
    # lexical over [12, 9, 3]: 5 -> 1, 2 -> 2/3, 7 -> 0
    pos, sc = convex(DENSE, LEXICAL, alpha=0.3)
    # 7: .3; 3: .24; 5: .06 + .7 = .76; 1: 0; 2: .7 * 2/3 = .4667
    assert pos.tolist() == [5, 2, 7, 3, 1]
    np.testing.assert_allclose(sc, [0.76, 0.7 * 2 / 3, 0.3, 0.24, 0.0], rtol=1e-6)
    pos, _ = convex(DENSE, LEXICAL, alpha=0.9)  # 7: .9; 3: .72; 5: .18 + .1 = .28; 2: .0667; 1: 0
    assert pos.tolist() == [7, 3, 5, 2, 1]


def test_edges():
    empty = ranking([])
    pos, sc = convex(DENSE, empty, alpha=0.5)  # no lexical match: the dense order, half weight
    assert pos.tolist() == [7, 3, 5, 1] and sc[0] == pytest.approx(0.5)
    pos, _ = rrf(empty, LEXICAL, rrf_k=60)
    assert pos.tolist() == [5, 2, 7]
    np.testing.assert_array_equal(min_max(np.array([2.0, 2.0])), [1.0, 1.0])
    assert fuse(DENSE, LEXICAL, FusionParams("convex", alpha=0.3), top_k=1)[0].tolist() == [5]
    assert fuse(DENSE, LEXICAL, FusionParams("rrf", rrf_k=1), top_k=3)[0].tolist() == [5, 7, 2]
    assert FusionParams.from_record(FusionParams("convex", alpha=0.2).record()) == FusionParams(
        "convex", alpha=0.2
    )


def test_manifest_record_keeps_rrfs_constant_under_k():
    """Published manifests carry RRF's constant as `fusion.k`: the Python name rrf_k reads and writes it."""
    assert FusionParams.from_record({"method": "rrf", "k": 20.0, "depth": 50}) == FusionParams(
        "rrf", rrf_k=20.0, depth=50
    )
    assert FusionParams(rrf_k=5.0).record() == {"method": "rrf", "k": 5.0, "alpha": 0.5, "depth": 100}


def test_fused_scores_are_the_per_position_sums_by_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n_d, n_l = int(rng.integers(0, 30)), int(rng.integers(0, 30))
        dense = (
            rng.choice(60, n_d, replace=False).astype(np.int64),
            np.sort(rng.random(n_d))[::-1].astype(np.float32),
        )
        lexical = (
            rng.choice(60, n_l, replace=False).astype(np.int64),
            np.sort(rng.random(n_l))[::-1].astype(np.float32),
        )
        for params in (FusionParams("rrf", rrf_k=5.0), FusionParams("convex", alpha=0.3)):
            pos, sc = fuse(dense, lexical, params, 10)
            want: dict[int, float] = {}
            if params.method == "rrf":
                terms = [
                    (p, 1 / (5.0 + r)) for lst in (dense, lexical) for r, p in enumerate(lst[0].tolist(), 1)
                ]
            else:
                terms = [
                    (p, 0.3 * s) for p, s in zip(dense[0].tolist(), min_max(dense[1]).tolist(), strict=True)
                ]
                terms += [
                    (p, 0.7 * s)
                    for p, s in zip(lexical[0].tolist(), min_max(lexical[1]).tolist(), strict=True)
                ]
            for p, s in terms:
                want[p] = want.get(p, 0.0) + s
            best = sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
            np.testing.assert_allclose(sc, [s for _, s in best], rtol=1e-5)
            assert sc.dtype == np.float32 and len(set(pos.tolist())) == len(pos) == len(best)
