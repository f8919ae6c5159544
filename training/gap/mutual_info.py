"""Mutual-information lower bounds on I(query; relevant document), under a sampler for which they are bounds.

The InfoNCE bound I(X;Y) ≥ log(k+1) − E l_NCE (van den Oord et al. 2018, arXiv 1807.03748, §2.3; Poole et
al. 2019, arXiv 1905.06922) needs the k negatives to be i.i.d. draws from the positives' own marginal p(y),
independent of the anchor. The risk estimators draw from the corpus minus the query's relevant documents
instead; under that sampler the figures are not bounds (a toy with I = log 50 gives I_NCE(63) = log 64 and
−CE∞ = 1/τ, both far above the truth: tests/training/gap/test_gap_mutual_info.py). So the MI section builds its
own negatives from the held-out set itself:

- each held-out query contributes one document drawn from its relevant ones, so a query's negatives are
  the positives of *other* queries — independent of the anchor, distributed as p(y) when queries are
  i.i.d.; documents relevant to the anchor's own query are **not** excluded (a draw from p(y) may be one);
- I_NCE(k): k distinct other queries drawn without replacement, so the k negatives are i.i.d. p(y);
- −CE∞ = E[s⁺/τ] − E log μ(a), μ(a) = E_{y~p(y)} e^{s(a,y)/τ} (the normalised-critic bound of Barber &
  Agakov type, Poole et al. 2019 §2): μ is averaged over every other query (each query's relevant documents
  weighted equally), and since log of a mean of P terms underestimates log μ by ≈ c1(a)/P (Jensen;
  c1 = ½ Var(e^{s/τ})/μ², the first-order coefficient of the risk's 1/k expansion), each anchor's term gets
  that correction. Where the mean correction exceeds `MAX_FIRST_ORDER` nats, first order is not enough and
  the figure is `NotComputable`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contract.bundles.report_schema import Estimate, NotComputable
from training.gap import bootstrap
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.intervals import estimate_from_boot, widen

MI_SAMPLER = (
    "positives of other held-out queries (one relevant document per query): I_NCE(k) uses k distinct other "
    "queries drawn without replacement, −CE∞ averages e^{s/τ} over all of them; i.i.d. draws from the "
    "positives' marginal as the InfoNCE bound requires; the anchor query's own relevant documents are not "
    "excluded from other queries' positives"
)
# largest first-order finite-pool correction (nats) we apply: beyond it the second-order terms, of the order of
# the square of the correction and of higher moments of e^{s/τ}, are no longer small (bench/gap/gap_validation.py)
MAX_FIRST_ORDER = 0.1


@dataclass
class MISection:
    mi_k: Estimate | NotComputable
    mi_inf: Estimate | NotComputable


def _group_starts(groups: np.ndarray) -> np.ndarray:
    """Start index of each query's run of anchors (anchors are stored query by query)."""
    if np.any(np.diff(groups) < 0):
        raise ValueError("anchors must be grouped query by query (non-decreasing groups)")
    return np.flatnonzero(np.r_[True, np.diff(groups) != 0])


def query_log_means(logits: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per row and query, log of the mean of e^{logits} over that query's columns: (n, n_cols) -> (n, Q)."""
    m = logits.max(axis=1, keepdims=True)  # (n, 1)
    sums = np.add.reduceat(np.exp(logits - m), starts, axis=1)  # (n, Q)
    sizes = np.diff(np.r_[starts, logits.shape[1]])  # (Q,)
    return np.log(sums) + m - np.log(sizes)


def _row_blocks(n_rows: int, n_cols: int) -> list[slice]:
    """Row blocks whose (rows × n_cols) float64 temporaries stay under est._CHUNK_ELEMENTS."""
    chunk_rows = max(1, est._CHUNK_ELEMENTS // max(n_cols, 1))
    return [slice(i, min(i + chunk_rows, n_rows)) for i in range(0, n_rows, chunk_rows)]


def marginal_terms(a: Anchors, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Per anchor: −s⁺/τ + log μ̂(a) with μ̂ over the other queries' positives, and c1(a)/P (P = Q − 1)."""
    starts = _group_starts(a.groups)
    own = np.searchsorted(a.groups[starts], a.groups)  # (n,) run index of each anchor's own query
    p = len(starts) - 1
    log_mu, log_m2 = np.empty(len(own)), np.empty(len(own))
    for rows in _row_blocks(len(own), len(own)):
        logits = np.asarray(a.sim[rows][:, a.pos_col], dtype=np.float64) / tau  # (m, n): vs positive of j
        lm1 = query_log_means(logits, starts)  # (m, Q) log E_{y ~ query j} e^{s/τ}
        lm2 = query_log_means(2.0 * logits, starts)  # (m, Q) same for e^{2s/τ}
        r = np.arange(lm1.shape[0])
        lm1[r, own[rows]] = -np.inf  # never the anchor's own query
        lm2[r, own[rows]] = -np.inf
        log_mu[rows] = est.logsumexp_rows(lm1) - math.log(p)
        log_m2[rows] = est.logsumexp_rows(lm2) - math.log(p)
    c1 = 0.5 * np.expm1(log_m2 - 2.0 * log_mu)
    return -np.asarray(a.pos, dtype=np.float64) / tau + log_mu, c1 / p


def marginal_infonce(a: Anchors, n_negatives: int, tau: float, rng: np.random.Generator) -> np.ndarray:
    """Per anchor I_NCE term log(k+1) − l_NCE with k = n_negatives distinct other queries' positives as
    negatives (n,)."""
    k = n_negatives  # the paper's k in the formulas below
    starts = _group_starts(a.groups)
    own = np.searchsorted(a.groups[starts], a.groups)  # (n,)
    sizes = np.diff(np.r_[starts, len(a.groups)])
    rep = a.pos_col[starts + (rng.random(len(starts)) * sizes).astype(np.int64)]  # (Q,) one positive each
    out = np.empty(len(own))
    for rows in _row_blocks(len(own), len(starts)):
        keys = rng.random((len(own[rows]), len(starts)))  # (m, Q): a random order of the queries per anchor
        keys[np.arange(keys.shape[0]), own[rows]] = np.inf  # the anchor's own query last: never drawn
        picked = np.argpartition(keys, k - 1, axis=1)[:, :k]  # (m, k) k distinct other queries
        neg = np.take_along_axis(np.asarray(a.sim[rows][:, rep], dtype=np.float64), picked, axis=1)
        out[rows] = math.log(k + 1) - (est.infonce_risk(a.pos[rows], neg, tau) + math.log(k))
    return out


def mi_section(
    a: Anchors, n_negatives: int, tau: float, n_boot: int, level: float, rng: np.random.Generator
) -> MISection:
    """(d): I_NCE(k), k = n_negatives, and −CE∞ on held-out anchors under the positives' marginal,
    bootstrap CIs over queries."""
    k = n_negatives  # the paper's k in the formulas below
    n_q = int(np.unique(a.groups).size)
    method = f"bootstrap percentile over held-out queries ({n_boot} resamples); negatives: {MI_SAMPLER}"
    mi_k: Estimate | NotComputable
    if k > n_q - 1:
        mi_k = NotComputable(
            name="mi_lower_bound_k",
            reason=f"k = {k} i.i.d. negatives from the positives' marginal need {k} other held-out queries; "
            f"there are {n_q - 1}",
        )
    else:
        terms = marginal_infonce(a, k, tau, rng)
        mi_k = estimate_from_boot(
            float(terms.mean()), bootstrap.bootstrap_means(terms, n_boot, rng, a.groups), level, method
        )
    if n_q < 2:
        return MISection(
            mi_k, NotComputable(name="mi_lower_bound_inf", reason="fewer than 2 held-out queries")
        )
    ce, corr = marginal_terms(a, tau)
    if float(corr.mean()) > MAX_FIRST_ORDER:
        mi_inf: Estimate | NotComputable = NotComputable(
            name="mi_lower_bound_inf",
            reason=f"the {n_q - 1} other held-out queries' positives estimate μ(a) with a finite-sample bias "
            f"≈ c1/P = {float(corr.mean()):.3g} nats, beyond the {MAX_FIRST_ORDER} nats a first-order "
            "correction can be trusted for (e^{s/τ} too heavy-tailed at this τ); use mi_lower_bound_k",
        )
    else:
        bound = -(ce + corr)  # (n,) the corrected −CE∞ terms
        mi_inf = widen(
            estimate_from_boot(
                float(bound.mean()),
                bootstrap.bootstrap_means(bound, n_boot, rng, a.groups),
                level,
                f"−CE∞ with μ(a) over the positives' marginal, each anchor's log μ̂ raised by c1(a)/P "
                f"(mean {float(corr.mean()):.3g} nats); {method}",
            ),
            low=0.5 * float(corr.mean()),
            high=0.5 * float(corr.mean()),
        )
    return MISection(mi_k, mi_inf)
