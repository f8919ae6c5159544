"""Full validation studies of the gap estimators on the synthetic sphere world (training/experiments/gap_simulation.py).

    flock "$HEAVY_LOCK" .venv/bin/python -m bench gap_validation [--quick]

Prints markdown tables: (1) CE∞ — closed form vs plug-in (raw and finite-pool corrected) vs the a + b/k fit,
at τ ≥ 0.2 and at the default τ = 0.05 (d = 16, 64 and a 384-dimensional world with MiniLM-like positives);
(2) the O(1/k) rate of Δ(k) = R(k) − CE∞ with local slopes of log Δ against log k; (3) coverage of the
bootstrap 95% CI of the gap over many seeded simulations; (4) the finite-pool bias of log μ̂ against its
first-order value c1/N (why the correction stops at MAX_FIRST_ORDER and is widened by half of itself);
(5) coverage of CE∞'s interval at τ = 0.05 over fresh pools, raw vs corrected; (6) how far R̂(k) from a pool
of N drifts from the population R(k) as k/N grows (why the report's grid stops at N/8); (7) the MI toy
with known MI = log 50 under the corpus sampler and under the positives' marginal. The fast versions are
the tests in tests/training/gap/test_gap_simulation.py and test_gap_mutual_info.py.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from tqdm.auto import tqdm

from contract.bundles.report_schema import Estimate
from training.experiments.gap_simulation import (
    MixtureWorld,
    SphereWorld,
    sample_uniform_cosine,
    true_risk,
    vmf_mean_cosine,
)
from training.gap import bootstrap, bounds
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.mutual_info import MAX_FIRST_ORDER, mi_section
from training.gap.risk_vs_k import K_POOL_FRACTION, risk_vs_k_section

WORLDS = [
    SphereWorld(dim=8, kappa=10.0, tau=0.5),
    SphereWorld(dim=16, kappa=20.0, tau=0.5),
    SphereWorld(dim=8, kappa=5.0, tau=1.0),
    SphereWorld(dim=16, kappa=10.0, tau=0.3),
    SphereWorld(dim=32, kappa=40.0, tau=0.2),
]
# the default τ = 0.05; κ = 400 at d = 384 gives E⟨a, z⁺⟩ ≈ 0.63, the cosine of a tuned MiniLM positive
CLUSTER_KAPPA = 10.0  # table 8's clustered corpus: 6 vMF clusters, E⟨z, centre⟩ ≈ 0.53 at d = 16
DEFAULT_TAU_WORLDS = [
    SphereWorld(dim=16, kappa=20.0, tau=0.05),
    SphereWorld(dim=64, kappa=50.0, tau=0.05),
    SphereWorld(dim=64, kappa=100.0, tau=0.05),
    SphereWorld(dim=384, kappa=400.0, tau=0.05),
]


def sphere_anchors(world: SphereWorld, n: int, n_pool: int, rng: np.random.Generator) -> Anchors:
    """The report's Anchors for the sphere world: every anchor its own query, one shared pool."""
    anchors, positives, pool = world.sample_vectors(n, n_pool, rng)
    return Anchors(
        sim=(anchors @ pool.T).astype(np.float32),  # (n, N)
        pos=(anchors * positives).sum(1),
        exclude=est.pad_exclusions([[] for _ in range(n)], n_pool),
        groups=np.arange(n),
        n_queries=n,
        pos_col=np.zeros(n, dtype=np.int64),
    )


def ce_inf_table(worlds: list[SphereWorld], n_anchors: int, n_pool: int, k_max: int, seed: int) -> None:
    """CE∞ through the report's own section (capped grid, fit rule, raw and corrected plug-in)."""
    print(
        f"\n### 1. CE∞: closed form vs estimators ({n_anchors} anchors, pool {n_pool}, k ≤ {k_max} and ≤ N/8)\n"
    )
    print(
        "| d | κ | τ | CE∞ true | plug-in [95% CI] | rel err | corrected [CI] | fit a | rel err | fit range "
        "| accepted | served ce_inf_fit | d1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for world in worlds:
        rng = np.random.default_rng(seed)
        a = sphere_anchors(world, n_anchors, n_pool, rng)
        c = risk_vs_k_section(a, world.tau, k_max, 500, 0.95, 0.01, rng)
        truth, p, f = world.ce_inf(), c.ce_inf_plugin, c.fit
        corr = c.ce_inf_corrected
        corr_s = (
            f"{corr.value:.4f} [{corr.ci_low:.3f}, {corr.ci_high:.3f}]"
            if isinstance(corr, Estimate)
            else "n/c"
        )
        served = "estimate" if isinstance(c.ce_inf_fit, Estimate) else "not_computable"
        print(
            f"| {world.dim} | {world.kappa:g} | {world.tau:g} | {truth:.4f} | {p.value:.4f} [{p.ci_low:.3f}, "
            f"{p.ci_high:.3f}] | {abs(p.value - truth) / abs(truth):.2%} | {corr_s} | {f.a:.4f} | "
            f"{abs(f.a - truth) / abs(truth):.2%} | [{f.k_range[0]}, {f.k_range[1]}] | {f.accepted} | {served} | "
            f"{world.d1():.3g} |"
        )


def rate_table(n: int, seed: int) -> None:
    ks = [8, 16, 32, 64, 128, 256, 512, 1024]
    print(f"\n### 2. Rate: Δ(k) = R(k) − CE∞ ({n} anchors per k; control variate −s⁺/τ)\n")
    print("| world | " + " | ".join(f"k={k}" for k in ks) + " | slope (k ≥ 64) |")
    print("|---|" + "---|" * (len(ks) + 1))
    for world in [*WORLDS[:4], DEFAULT_TAU_WORLDS[1]]:
        rng = np.random.default_rng(seed)
        deltas = []
        for k in ks:
            step, parts = max(1, 4_000_000 // k), []
            for start in range(0, n, step):
                pos, neg = world.sample_sims(min(step, n - start), k, rng)
                parts.append(est.infonce_risk(pos, neg, world.tau) + pos / world.tau)
            deltas.append(float(np.concatenate(parts).mean()) - world.log_mu())
        sel = [i for i, k in enumerate(ks) if k >= 64]
        slope = np.polyfit(np.log(np.array(ks)[sel]), np.log(np.array(deltas)[sel]), 1)[0]
        name = f"d={world.dim} κ={world.kappa:g} τ={world.tau:g}"
        print(f"| {name} | " + " | ".join(f"{d:.4g}" for d in deltas) + f" | {slope:.3f} |")
        print(
            "| k·Δ(k) vs b="
            + f"{world.first_order_b():.3f} | "
            + " | ".join(f"{k * d:.3f}" for k, d in zip(ks, deltas, strict=True))
            + " | |"
        )


def coverage_table(n_sims: int, n_boot: int, seed: int) -> None:
    print(
        f"\n### 3. Coverage of the bootstrap 95% CI of the gap ({n_sims} simulations each, {n_boot} resamples)\n"
    )
    print("| n per split | k | true gap | coverage | mean CI width | binomial 95% band of the coverage |")
    print("|---|---|---|---|---|---|")
    train_world = SphereWorld(dim=8, kappa=14.0, tau=0.5)
    test_world = SphereWorld(dim=8, kappa=8.0, tau=0.5)
    rng = np.random.default_rng(seed)
    for k in (15, 127):
        true_gap = (
            true_risk(test_world, k, rng, n=1_000_000)[0] - true_risk(train_world, k, rng, n=1_000_000)[0]
        )
        for n in (50, 200, 1000):
            covered, widths = 0, []
            for s in range(n_sims):
                l_train = train_world.risk_samples(n, k, rng)
                l_test = test_world.risk_samples(n, k, rng)
                g = bootstrap.gap_with_ci(l_train, l_test, n_boot=n_boot, rng=np.random.default_rng(seed + s))
                covered += g.gap_ci[0] <= true_gap <= g.gap_ci[1]
                widths.append(g.gap_ci[1] - g.gap_ci[0])
            p = covered / n_sims
            half = 1.96 * math.sqrt(p * (1 - p) / n_sims)
            print(
                f"| {n} | {k} | {true_gap:.4f} | {p:.3f} | {np.mean(widths):.4f} | [{p - half:.3f}, {p + half:.3f}] |"
            )


def pool_bias_table(seed: int) -> None:
    print(
        "\n### 4. Finite-pool bias of log μ̂ = log mean e^{s/τ} over N uniform documents vs first order −c1/N\n"
    )
    print("| d | τ | c1 | N | c1/N | measured bias | ± se | measured / first order |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(seed)
    for d, tau in ((8, 0.1), (16, 0.1), (16, 0.05), (64, 0.05), (384, 0.05)):
        world = SphereWorld(dim=d, kappa=10.0, tau=tau)
        for n_pool in (256, 1024, 2048, 8192):
            reps = max(200, 2_000_000 // n_pool)
            s = sample_uniform_cosine(d, (reps, n_pool), rng)  # (reps, N)
            lm = est.logsumexp_rows(s / tau) - math.log(n_pool)
            bias, se, first = lm.mean() - world.log_mu(), lm.std() / math.sqrt(reps), world.c1() / n_pool
            print(
                f"| {d} | {tau:g} | {world.c1():.3g} | {n_pool} | {first:.4f} | {bias:.4f} | {se:.4f} | "
                f"{-bias / first:.2f} |"
            )


def corrected_coverage_table(n_runs: int, seed: int) -> None:
    print(
        f"\n### 5. Coverage of CE∞'s 95% interval (τ = 0.05; last row τ = 0.1) over {n_runs} fresh (anchors, pool) draws\n"
    )
    print(
        "| d | κ | N | anchors | c1/N true | raw covers | corrected covers | corrected served | mean raw error |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for world, n_pool, n in (
        (SphereWorld(16, 20.0, 0.05), 2048, 400),
        (SphereWorld(16, 20.0, 0.05), 8192, 400),
        (SphereWorld(64, 50.0, 0.05), 2048, 400),
        (SphereWorld(384, 400.0, 0.05), 2048, 400),
        (SphereWorld(8, 10.0, 0.1), 200, 4000),
    ):
        raw_cov, corr_cov, served, errors = 0, 0, 0, []
        for r in range(n_runs):
            rng = np.random.default_rng([seed, r])
            a = sphere_anchors(world, n, n_pool, rng)
            c = risk_vs_k_section(a, world.tau, 8, 300, 0.95, 0.01, rng)
            truth = world.ce_inf()
            raw_cov += c.ce_inf_plugin.ci_low <= truth <= c.ce_inf_plugin.ci_high
            errors.append(c.ce_inf_plugin.value - truth)
            if isinstance(c.ce_inf_corrected, Estimate):
                served += 1
                corr_cov += c.ce_inf_corrected.ci_low <= truth <= c.ce_inf_corrected.ci_high
        print(
            f"| {world.dim} | {world.kappa:g} | {n_pool} | {n} | {world.c1() / n_pool:.3f} | {raw_cov}/{n_runs} | "
            f"{corr_cov}/{served} | {served}/{n_runs} | {np.mean(errors):+.4f} |"
        )


def _old_corrected_interval(
    a: Anchors, tau: float, n_boot: int, rng: np.random.Generator
) -> tuple[float, float]:
    """The interval ce_inf_corrected had before the pool bootstrap: anchors only, widened by half the correction."""
    allowed = a.sim.shape[1] - (a.exclude >= 0).sum(axis=1)
    _, c1 = est.first_order_terms(a.sim, a.pos, a.exclude, tau)
    terms = est.plugin_ce_inf_terms(a.sim, a.pos, a.exclude, tau) + c1 / allowed
    lo, hi = bootstrap.percentile_ci(bootstrap.bootstrap_means(terms, n_boot, rng, a.groups))
    half = 0.5 * float((c1 / allowed).mean())
    return lo - half, hi + half


def _corpus_truth(world: SphereWorld | MixtureWorld, pool_vectors: np.ndarray, pop_mean_log_mu: float,
                  rng: np.random.Generator, n: int = 4000) -> float:  # fmt: skip
    """CE∞ with this pool as the negatives' population: −A_d(κ)/τ + E_a log μ_pool(a), the expectation by Monte
    Carlo over fresh anchors with the exact log μ(a) as control variate (only the difference is sampled)."""
    fresh = (
        world.sample_latents(n, rng)
        if isinstance(world, MixtureWorld)
        else world.sample_vectors(n, 1, rng)[0]
    )
    log_mu_pool = est.logsumexp_rows(fresh @ pool_vectors.T / world.tau) - math.log(len(pool_vectors))
    exact = world.log_mu_of(fresh) if isinstance(world, MixtureWorld) else np.full(n, world.log_mu())
    return (
        -vmf_mean_cosine(world.kappa, world.dim) / world.tau
        + pop_mean_log_mu
        + float(np.mean(log_mu_pool - exact))
    )


def coverage_cell(
    world: SphereWorld | MixtureWorld,
    name: str,
    tau: float,
    n_pool: int,
    n: int,
    n_runs: int,
    n_boot: int,
    seed: int,
    truths: tuple[float, float, float],
) -> None:
    """One row of table 8: n_runs fresh (anchors, pool) draws of one world at one τ, pool size and n."""
    truth, c1_true, pop_log_mu = truths
    served, covered, old_cov, plug_cov = 0, 0, 0, 0
    errors: list[float] = []
    halves: list[float] = []
    c1n, growth = [], []  # c1/N of the pool and its upper bound, per draw
    reasons: dict[str, int] = {}
    for r in tqdm(range(n_runs), desc=f"{name} τ={tau} N={n_pool} n={n}", leave=False):
        rng = np.random.default_rng([seed, r, n_pool, n, int(tau * 100)])
        anchors, positives, pool = world.sample_vectors(n, n_pool, rng)
        a = Anchors(
            sim=(anchors @ pool.T).astype(np.float32),  # (n, N)
            pos=(anchors * positives).sum(1),
            exclude=est.pad_exclusions([[] for _ in range(n)], n_pool),
            groups=np.arange(n),
            n_queries=n,
            pos_col=np.zeros(n, dtype=np.int64),
        )
        c = risk_vs_k_section(a, tau, 2, n_boot, 0.95, 0.01, rng)
        c1n.append(c.c1.value / n_pool)
        growth.append(est.finite_pool_terms(a.sim, a.exclude, tau, rng).c1_upper() / n_pool)
        corpus_truth = _corpus_truth(world, pool, pop_log_mu, rng)
        plug_cov += c.ce_inf_plugin.ci_low <= corpus_truth <= c.ce_inf_plugin.ci_high
        lo, hi = _old_corrected_interval(a, tau, n_boot, rng)
        old_cov += lo <= truth <= hi
        if isinstance(c.ce_inf_corrected, Estimate):
            e = c.ce_inf_corrected
            served += 1
            covered += e.ci_low <= truth <= e.ci_high
            errors.append(e.value - truth)
            halves.append((e.ci_high - e.ci_low) / 2)
        else:
            key = "pool c1/N > 0.1" if c1n[-1] > MAX_FIRST_ORDER else "upper c1/N > 0.1"
            reasons[key] = reasons.get(key, 0) + 1
    if served:
        p = covered / served
        band = 1.96 * math.sqrt(p * (1 - p) / served)
        cov_s = f"{covered}/{served} = {p:.1%}"
        band_s = f"[{p - band:.3f}, {p + band:.3f}]"
        err_s = f"{np.mean(errors):+.4f} | {np.std(errors):.4f} | {np.mean(halves):.4f}"
    else:
        cov_s, band_s, err_s = "—", "—", "— | — | —"
    not_served = ", ".join(f"{v} {k}" for k, v in reasons.items())
    print(
        f"| {name} | {tau:g} | {n_pool} | {n} | {c1_true / n_pool:.4f} | {np.mean(c1n):.4f} | "
        f"{np.mean(growth):.4f} | {served}/{n_runs}{' (' + not_served + ')' if not_served else ''} "
        f"| {cov_s} | {band_s} | {err_s} | {old_cov / n_runs:.1%} | {plug_cov / n_runs:.1%} |",
        flush=True,
    )


def two_way_coverage_table(
    n_runs: int,
    n_boot: int,
    seed: int,
    taus: tuple[float, ...] = (0.05, 0.2),
    only: tuple[str, ...] = (),
    pools: tuple[int, ...] = (200, 2048),
) -> None:
    """Coverage of ce_inf_corrected (population CE∞) and of ce_inf_plugin (this corpus's CE∞), d = 16."""
    print(
        f"\n### 8. CE∞ intervals over {n_runs} fresh (anchors, pool) draws per cell, d = 16, κ = 20 ({n_boot} "
        f"resamples; clustered = 6 vMF(κ_c = {CLUSTER_KAPPA:g}) clusters)\n"
    )
    print(
        "| corpus | τ | N | anchors | c1/N true | c1/N pool (mean) | c1/N upper (mean) | corrected served | "
        "corrected covers | binomial 95% band | mean error | sd error | mean half-width | anchors-only interval "
        "covers | plug-in covers its corpus CE∞ |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for tau in taus:
        worlds: list[tuple[str, SphereWorld | MixtureWorld]] = [
            ("uniform", SphereWorld(16, 20.0, tau)),
            ("clustered", MixtureWorld(16, 20.0, tau, n_clusters=6, cluster_kappa=CLUSTER_KAPPA)),
        ]
        if (
            tau == 0.05
        ):  # tighter clusters: c1/N = 0.04 at N = 2,048, a τ = 0.05 cell where the correction is served
            worlds.append(("clustered κ_c 20", MixtureWorld(16, 20.0, tau, n_clusters=6, cluster_kappa=20.0)))
        for name, world in (w for w in worlds if not only or w[0] in only):
            if isinstance(world, MixtureWorld):
                pop = world.population(np.random.default_rng([seed, 99]), n=400_000)
                truth, c1_true, pop_log_mu = pop["ce_inf"], pop["c1"], pop["ce_inf"] + vmf_mean_cosine(
                    world.kappa, world.dim) / tau  # fmt: skip
            else:
                truth, c1_true, pop_log_mu = world.ce_inf(), world.c1(), world.log_mu()
            for n_pool in pools:
                for n in (400, 4000):
                    coverage_cell(
                        world, name, tau, n_pool, n, n_runs, n_boot, seed, (truth, c1_true, pop_log_mu)
                    )


def pool_fraction_table(n: int, seed: int) -> None:
    print(
        f"\n### 6. R̂(k) from a pool of N vs the population R(k) ({n} anchors, fresh pool per 500 anchors; "
        "control variate −s⁺/τ)\n"
    )
    n_pool = 1024
    fracs = [1 / 64, 1 / 16, 1 / K_POOL_FRACTION, 1 / 4, 1 / 2, 1, 2]
    print(f"| world (N = {n_pool}) | " + " | ".join(f"k = N·{f:g}" for f in fracs) + " |")
    print("|---|" + "---|" * len(fracs))
    for world in (SphereWorld(8, 10.0, 0.5), SphereWorld(8, 10.0, 0.1), SphereWorld(16, 20.0, 0.05)):
        rng = np.random.default_rng(seed)
        cells = []
        for f in fracs:
            k = max(1, int(n_pool * f))
            pool_terms, fresh_terms = [], []
            for _ in range(n // 500):
                a = sphere_anchors(world, 500, n_pool, rng)
                ex = a.exclude
                pool_terms.append(
                    est.risk_with_random_negatives(a.sim, a.pos, ex, k, world.tau, rng) + a.pos / world.tau
                )
                pos, neg = world.sample_sims(500, k, rng)
                fresh_terms.append(est.infonce_risk(pos, neg, world.tau) + pos / world.tau)
            p, q = np.concatenate(pool_terms), np.concatenate(fresh_terms)
            se = math.sqrt(p.var() / len(p) + q.var() / len(q))
            cells.append(f"{p.mean() - q.mean():+.4f} ± {se:.4f}")
        print(f"| d={world.dim} κ={world.kappa:g} τ={world.tau:g} | " + " | ".join(cells) + " |")


def mi_toy_table(seed: int) -> None:
    print("\n### 7. MI toy: 50 classes, I(query; document) = log 50 = 3.912 nats, τ = 0.05, k = 63\n")
    print("| sampler | I_NCE(63) | −CE∞ |")
    print("|---|---|---|")
    rng = np.random.default_rng(seed)
    n_q, n_cls, per = 1000, 50, 2
    cls = rng.integers(0, n_cls, n_q)
    doc_cls = np.repeat(np.arange(n_cls), per)
    rows = np.repeat(np.arange(n_q), per)
    cols = (cls[:, None] * per + np.arange(per)[None, :]).ravel()
    sim = (cls[rows][:, None] == doc_cls[None, :]).astype(np.float32)
    a = Anchors(
        sim=sim,
        pos=np.ones(len(rows)),
        exclude=est.pad_exclusions([list(cls[q] * per + np.arange(per)) for q in rows], len(doc_cls)),
        groups=rows,
        n_queries=n_q,
        pos_col=cols,
    )
    r = est.risk_with_random_negatives(a.sim, a.pos, a.exclude, 63, 0.05, rng).mean()
    ce = est.plugin_ce_inf_terms(a.sim, a.pos, a.exclude, 0.05).mean()
    print(
        f"| corpus minus the query's relevant documents (schema 1) | {bounds.mi_lower_bound(r, 63):.3f} | {-ce:.3f} |"
    )
    mi = mi_section(a, 63, 0.05, 500, 0.95, rng)
    assert isinstance(mi.mi_k, Estimate) and isinstance(mi.mi_inf, Estimate)
    print(
        f"| positives of other queries (the report) | {mi.mi_k.value:.3f} [{mi.mi_k.ci_low:.3f}, {mi.mi_k.ci_high:.3f}] "
        f"| {mi.mi_inf.value:.3f} [{mi.mi_inf.ci_low:.3f}, {mi.mi_inf.ci_high:.3f}] |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller studies (a few minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tables", default="1,2,3,4,5,6,7,8", help="which tables to print, e.g. 4,5")
    parser.add_argument("--draws", type=int, default=None, help="table 8: draws per cell (default 200)")
    parser.add_argument(
        "--boot", type=int, default=2000, help="table 8: bootstrap resamples (the report's 2000)"
    )
    parser.add_argument("--taus", default="0.05,0.2", help="table 8: temperatures")
    parser.add_argument("--worlds", default="", help="table 8: only these corpora (comma-separated names)")
    parser.add_argument("--pools", default="200,2048", help="table 8: pool sizes")
    args = parser.parse_args(argv)
    tables = {int(t) for t in args.tables.split(",")}
    t0 = time.perf_counter()
    print(f"(MAX_FIRST_ORDER = {MAX_FIRST_ORDER} nats, grid cap N/{K_POOL_FRACTION})")
    q = args.quick
    studies = {
        1: lambda: ce_inf_table(
            WORLDS + DEFAULT_TAU_WORLDS, *((600, 4000, 2048) if q else (2000, 10_000, 8192)), args.seed
        ),
        2: lambda: rate_table(20_000 if q else 100_000, args.seed),
        3: lambda: coverage_table(*((200, 600) if q else (500, 1000)), args.seed),
        4: lambda: pool_bias_table(args.seed),
        5: lambda: corrected_coverage_table(20 if q else 100, args.seed),
        6: lambda: pool_fraction_table(4000 if q else 20_000, args.seed),
        7: lambda: mi_toy_table(args.seed),
        8: lambda: two_way_coverage_table(
            args.draws or (60 if q else 200),
            args.boot,
            args.seed,
            tuple(float(t) for t in args.taus.split(",")),
            tuple(w for w in args.worlds.split(",") if w),
            tuple(int(n) for n in args.pools.split(",")),
        ),
    }
    for number, study in studies.items():
        if number in tables:
            study()
            sys.stdout.flush()
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
