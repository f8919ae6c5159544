"""Schema-1 gap reports (older bundles) relabelled on load so that they claim nothing they cannot
support; contract.bundles.report_schema's validator calls `upgrade_v1`."""

from __future__ import annotations

from typing import Any

_REGENERATE = "written by report schema 1; regenerate the report (python -m training report) for this value"


def upgrade_v1(data: dict[str, Any], version: str) -> dict[str, Any]:
    """A schema-1 report relabelled so that it claims nothing it cannot support (older bundles stay loadable).

    Schema 1 served the MI figures under the corpus sampler (not lower bounds), the rejected fit's
    intercept as an estimate, and sample variability as a bound with n = anchors: those become
    `not_computable` or a `term`; fields schema 1 lacked are marked not computable or unknown.
    """
    data = dict(data)
    data["schema_version"] = version
    terms = dict(data.get("theory_terms", {}))
    if isinstance(terms.get("sample_variability"), dict):
        sv = dict(terms["sample_variability"], kind="term")
        sv["assumptions"] = sv.get("assumptions", "") + " [schema 1: n counted anchors, not queries]"
        terms["sample_variability"] = sv
    data["theory_terms"] = terms
    for name in ("mi_lower_bound_k", "mi_lower_bound_inf"):
        data[name] = {
            "kind": "not_computable",
            "name": name,
            "reason": "schema 1 drew negatives uniformly from the corpus minus the query's positives, under "
            "which this is not a lower bound on MI; " + _REGENERATE,
        }
    fit = data.get("fit", {})
    if isinstance(fit, dict) and not fit.get("accepted", True):
        data["ce_inf_fit"] = {
            "kind": "not_computable",
            "name": "ce_inf_fit",
            "reason": "the a + b/k fit was not accepted: R̂(k) was not in the 1/k regime within the grid",
        }
    data.setdefault("mi_sampler", "unknown (schema 1)")
    data.setdefault("k_grid_rule", "schema 1: k = 1, 2, 4, … up to k_max, not capped by the pool size")
    data.setdefault("n_train_split_queries", data.get("n_train_queries", 0))
    data.setdefault(
        "ce_inf_corrected", {"kind": "not_computable", "name": "ce_inf_corrected", "reason": _REGENERATE}
    )
    return data
