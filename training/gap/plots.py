"""PNG plots of a GapReport: R(k) with the fitted a + b/k and CE∞, and train vs test risk with CIs."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display

import matplotlib.pyplot as plt
import numpy as np

from contract.atomic import atomic_path
from contract.bundles.report_schema import GapReport

logger = logging.getLogger(__name__)

RISK_VS_K_PNG = "risk_vs_k.png"
TRAIN_VS_TEST_PNG = "train_vs_test.png"


def _save(fig: plt.Figure, path: Path) -> None:
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    finally:
        plt.close(fig)


def plot_risk_vs_k(report: GapReport, path: Path) -> None:
    _save(risk_vs_k_figure(report), path)


def risk_vs_k_figure(report: GapReport) -> plt.Figure:
    """R̂(k) with its CI, the a + b/k fit, CE∞ with its band, the training k and k_sufficient."""
    ks = np.array([row.k for row in report.risk_vs_k], dtype=float)
    r = np.array([row.risk.value for row in report.risk_vs_k])
    lo = np.array([row.risk.ci_low for row in report.risk_vs_k])
    hi = np.array([row.risk.ci_high for row in report.risk_vs_k])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.fill_between(ks, lo, hi, color="C0", alpha=0.2, label=f"{report.risk_test.level:.0%} CI (anchors)")
    ax.plot(ks, r, "o-", color="C0", label="R̂(k), held-out anchors")
    fit = report.fit
    grid = np.geomspace(fit.k_range[0], fit.k_range[1], 100)
    style, status = ("-", "") if fit.accepted else (":", ", not linear: unreliable")
    label = f"fit a + b/k on k∈[{fit.k_range[0]}, {fit.k_range[1]}] (R² {fit.r2:.3f}{status})"
    ax.plot(grid, fit.a + fit.b / grid, style, color="C1", label=label)
    ce = report.ce_inf_plugin
    ax.axhline(ce.value, color="C2", ls="--", label=f"CE∞ plug-in {ce.value:.3f}")
    ax.axhspan(ce.ci_low, ce.ci_high, color="C2", alpha=0.15, label=f"CE∞ {ce.level:.0%} CI")
    ax.axvline(report.k, color="grey", ls=":", label=f"training k = {report.k}")
    if report.k_sufficient.k is not None:
        ax.axvline(
            report.k_sufficient.k, color="C3", ls="-.", label=f"k_sufficient(ε={report.k_sufficient.eps})"
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("negatives per anchor k")
    ax.set_ylabel("risk R(k) = InfoNCE − log k  [nats]")
    ax.set_title(f"Risk versus k — {report.model.name}, τ = {report.model.temperature:g}")
    # below the axes, never over them: inside, it covered the CE∞ band (issue 32); two columns keep the
    # figure narrow for the page on a phone. bbox_inches="tight" in _save keeps it in the PNG.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    return fig


def plot_train_vs_test(report: GapReport, path: Path) -> None:
    items = [("train", report.risk_train, "C0"), ("test", report.risk_test, "C1")]
    fig, ax = plt.subplots(figsize=(5, 4.5))
    for x, (_name, e, color) in enumerate(items):
        ax.errorbar(
            x,
            e.value,
            yerr=[[e.value - e.ci_low], [e.ci_high - e.value]],
            fmt="o",
            color=color,
            capsize=8,
            markersize=8,
        )
        ax.annotate(f"{e.value:.3f}", (x, e.value), textcoords="offset points", xytext=(12, -4))
    g = report.gap
    ax.set_xticks([0, 1], [f"train\n(n={report.n_train})", f"test\n(n={report.n_test})"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylabel(f"risk R(k={report.k}) [nats]")
    ax.set_title(f"gap {g.value:.3f} nats, {g.level:.0%} CI [{g.ci_low:.3f}, {g.ci_high:.3f}]", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    _save(fig, path)


def write_plots(report: GapReport, folder: Path) -> list[str]:
    """Write both PNGs into `folder`; returns their file names (for report.plots)."""
    plot_risk_vs_k(report, folder / RISK_VS_K_PNG)
    plot_train_vs_test(report, folder / TRAIN_VS_TEST_PNG)
    return [RISK_VS_K_PNG, TRAIN_VS_TEST_PNG]
