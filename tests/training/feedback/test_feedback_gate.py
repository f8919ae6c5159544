"""The gate's held-out feedback rule (training/bundle/store.py): a candidate worse than the live model on the
held-out judged queries by more than the tolerance is kept as a candidate; too few queries, a stale live
version or no feedback leave the test verdict as it was."""

from __future__ import annotations

from training.bundle.store import FEEDBACK_GATE_MIN_QUERIES, _feedback_verdict

PASSED = (True, "test ndcg@10 0.5000 vs live 0.5000 (tolerance 0.005)")


def _held(cand: float, live: float, n: int = FEEDBACK_GATE_MIN_QUERIES, version: str = "v1") -> dict:
    return {"candidate_ndcg@10": cand, "live_ndcg@10": live, "queries": n, "live_version": version}


def test_worse_on_the_held_out_judgments_is_refused():
    ok, why = _feedback_verdict(PASSED, _held(0.40, 0.60), 0.005, "v1")
    assert not ok and "held-out feedback nDCG@10 0.4000 is worse than live 0.6000" in why


def test_as_good_within_the_tolerance_passes_and_says_so():
    ok, why = _feedback_verdict(PASSED, _held(0.598, 0.60), 0.005, "v1")
    assert ok and why.startswith(PASSED[1]) and "0.5980 vs live 0.6000" in why


def test_too_few_queries_a_stale_live_version_or_no_feedback_keep_the_test_verdict():
    few = _feedback_verdict(PASSED, _held(0.0, 1.0, n=FEEDBACK_GATE_MIN_QUERIES - 1), 0.005, "v1")
    assert few[0] and "not gated" in few[1]
    stale = _feedback_verdict(PASSED, _held(0.0, 1.0, version="v0"), 0.005, "v1")
    assert stale[0] and "not compared" in stale[1]
    assert _feedback_verdict(PASSED, None, 0.005, "v1") == PASSED
    refused = (False, "kept: test worse")
    assert _feedback_verdict(refused, _held(1.0, 0.0), 0.005, "v1") == refused
