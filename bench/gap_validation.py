"""Full validation studies of the gap estimators on the synthetic sphere world (training/gap/simulate.py).

    flock /tmp/infonce-heavy.lock .venv/bin/python bench/gap_validation.py [--quick]

Prints three markdown tables: (1) CE∞ — closed form vs plug-in vs the a + b/k fit; (2) the O(1/k) rate of
Δ(k) = R(k) − CE∞ with local slopes of log Δ against log k; (3) coverage of the bootstrap 95% CI of the gap
over many seeded simulations, for several sample sizes and k. The fast versions are the tests in
tests/training/test_gap_simulation.py.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from training.gap import estimators as est
from training.gap.simulate import SphereWorld, true_risk

WORLDS = [
    SphereWorld(dim=8, kappa=10.0, tau=0.5),
    SphereWorld(dim=16, kappa=20.0, tau=0.5),
    SphereWorld(dim=8, kappa=5.0, tau=1.0),
    SphereWorld(dim=16, kappa=10.0, tau=0.3),
    SphereWorld(dim=32, kappa=40.0, tau=0.2),
]


def ce_inf_table(n_anchors: int, n_pool: int, k_max: int, seed: int) -> None:
    print(f"\n### 1. CE∞: closed form vs estimators ({n_anchors} anchors, pool {n_pool}, k ≤ {k_max})\n")
    print(
        "| d | κ | τ | CE∞ true | plug-in | rel err | fit a | rel err | fit range | accepted | b fit | b = d1−c1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for world in WORLDS:
        rng = np.random.default_rng(seed)
        anchors, positives, pool = world.sample_vectors(n_anchors, n_pool, rng)
        sim = (anchors @ pool.T).astype(np.float32)  # (n, N)
        pos = (anchors * positives).sum(1)
        exclude = est.pad_exclusions([[] for _ in range(n_anchors)], n_pool)
        truth = world.ce_inf()
        plugin = float(est.plugin_ce_inf_terms(sim, pos, exclude, world.tau).mean())
        ks = est.power_of_two_grid(k_max)
        curve, var = est.risk_curve(sim, pos, exclude, ks, world.tau, rng)
        fit = est.fit_inverse_k(ks, curve.mean(0), var)
        print(
            f"| {world.dim} | {world.kappa:g} | {world.tau:g} | {truth:.4f} | {plugin:.4f} | "
            f"{abs(plugin - truth) / abs(truth):.2%} | {fit.a:.4f} | {abs(fit.a - truth) / abs(truth):.2%} | "
            f"[{fit.k_min}, {fit.k_max}] | {fit.accepted} | {fit.b:.3f} | {world.first_order_b():.3f} |"
        )


def rate_table(n: int, seed: int) -> None:
    ks = [8, 16, 32, 64, 128, 256, 512, 1024]
    print(f"\n### 2. Rate: Δ(k) = R(k) − CE∞ ({n} anchors per k; control variate −s⁺/τ)\n")
    print("| world | " + " | ".join(f"k={k}" for k in ks) + " | slope (k ≥ 64) |")
    print("|---|" + "---|" * (len(ks) + 1))
    for world in WORLDS[:4]:
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
                g = est.gap_with_ci(l_train, l_test, n_boot=n_boot, rng=np.random.default_rng(seed + s))
                covered += g.gap_ci[0] <= true_gap <= g.gap_ci[1]
                widths.append(g.gap_ci[1] - g.gap_ci[0])
            p = covered / n_sims
            half = 1.96 * math.sqrt(p * (1 - p) / n_sims)
            print(
                f"| {n} | {k} | {true_gap:.4f} | {p:.3f} | {np.mean(widths):.4f} | [{p - half:.3f}, {p + half:.3f}] |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller studies (about a minute)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.quick:
        ce_inf_table(600, 4000, 2048, args.seed)
        rate_table(20_000, args.seed)
        coverage_table(200, 600, args.seed)
    else:
        ce_inf_table(2000, 10_000, 8192, args.seed)
        rate_table(100_000, args.seed)
        coverage_table(500, 1000, args.seed)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
