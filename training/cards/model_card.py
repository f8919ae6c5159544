"""True model cards: `model/README.md` of every trained model and `README.md` of every bundle.

sentence-transformers regenerates a card only for models its own trainer made; ours saved the base
model's card verbatim, telling users to load `sentence-transformers/all-MiniLM-L6-v2` and saying nothing
of the data, the loss, τ or Λ, `similarity.json` (without which an AnInfoNCE model is searched with the
wrong similarity), the metrics or the generalization gap. These cards are generated from what the run
and the bundle record (config.json / manifest, metrics, report.json, gate.json), so they cannot drift
from the artifact. Plain functions of JSON-like dicts: no model is loaded here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.atomic import write_text_atomic
from training.cards.metrics_table import markdown_table

CARD_FILE = "README.md"
HYPER_PARAMETERS = (
    "epochs",
    "batch_size",
    "lr",
    "max_seq_length",
    "hard_negatives",
    "random_negatives",
    "corpus_title_pairs",
    "grad_cache",
    "freeze_layers",
    "max_steps",
    "seed",
)

# Run with the model folder as the working directory; tests/training/publish/test_cards.py runs it verbatim.
USAGE_SNIPPET = """import json

import numpy as np
from sentence_transformers import SentenceTransformer

model_dir = "."  # this folder
model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
with open(f"{model_dir}/similarity.json") as f:
    sim = json.load(f)  # the similarity the model was trained with: use it, not plain cosine

queries = ["what causes bone loss"]
documents = ["Vitamin D deficiency reduces bone density.", "Statins lower cholesterol."]
q = model.encode(queries, normalize_embeddings=True)  # (n_queries, dim), unit rows
d = model.encode(documents, normalize_embeddings=True)  # (n_documents, dim)
if sim["metric"] == "aninfonce":
    scale = np.sqrt(np.asarray(sim["lambda"], dtype=np.float32))  # sqrt(Lambda), one per dimension
    q, d = q * scale, d * scale  # the index space: L2 search here reproduces the learned similarity
    scores = -0.5 * ((q[:, None, :] - d[None, :, :]) ** 2).sum(-1)
else:
    scores = q @ d.T  # cosine similarity
print(json.dumps(scores.tolist()))"""


def _fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return "" if value is None else str(value)


def record_section(record: dict[str, Any], key: str) -> dict[str, Any]:
    """record[key] as a dict; a bare string (older or hand-written configs: {"loss": "infonce"}) becomes
    {key: value}, anything else {}."""
    value = record.get(key)
    if isinstance(value, dict):
        return value
    return {key: value} if isinstance(value, str) else {}


def _estimate(est: dict[str, Any] | None) -> str:
    if not isinstance(est, dict) or "value" not in est:
        return "not computable" + (
            f" ({est['reason']})" if isinstance(est, dict) and est.get("reason") else ""
        )
    ci = ""
    if est.get("ci_low") is not None and est.get("ci_high") is not None:
        ci = f" [{est['ci_low']:.3f}, {est['ci_high']:.3f}]"
    return f"{est['value']:.3f}{ci}"


def similarity_section(similarity: dict[str, Any]) -> list[str]:
    lines = ["## Similarity: read `similarity.json` first", ""]
    if similarity.get("metric") == "aninfonce":
        lam = [float(x) for x in similarity.get("lambda") or []]
        summary = (
            f"min {min(lam):.3g}, median {sorted(lam)[len(lam) // 2]:.3g}, max {max(lam):.3g}" if lam else ""
        )
        lines += [
            "Trained with **AnInfoNCE** (Rusak et al., arXiv 2407.00143): a learned diagonal Λ, one weight per "
            f"embedding dimension ({len(lam)} values; {summary}), stored as `lambda` in `similarity.json`.",
            "",
            "The learned similarity of a query u and a document v (unit embeddings) is "
            "`-1/2 * sum_c Λ_c (u_c - v_c)^2 = -1/2 ||√Λ ⊙ (u - v)||^2`. **Plain cosine is not what this model "
            "was trained for**: scale both sides by √Λ and search with L2 (as the index does), or compute "
            "the formula above.",
        ]
    else:
        tau = similarity.get("temperature")
        lines += [
            "Trained with **InfoNCE**: the score of a query and a document is the cosine similarity of their "
            f"unit embeddings; the training logits were cosine / τ with τ = {_fmt(tau, 4)} "
            "(`temperature` in `similarity.json`).",
        ]
    return lines


def usage_section() -> list[str]:
    return [
        "## How to use",
        "",
        "Load this folder with sentence-transformers (no hub access needed) and apply `similarity.json`; run "
        "this from inside the folder:",
        "",
        "```python",
        USAGE_SNIPPET,
        "```",
    ]


def training_section(training_config: dict[str, Any], base_model: str) -> list[str]:
    config = training_config.get("config") if isinstance(training_config.get("config"), dict) else {}
    data = record_section(training_config, "data")
    loss = record_section(training_config, "loss")
    lines = ["## Training", ""]
    lines.append(f"- base model: `{base_model}`")
    if data:
        lines.append(
            f"- data: `{data.get('source', '?')}`, split `{data.get('train_split', '?')}`: "
            f"{data.get('n_train_pairs', '?')} (query, relevant document) pairs"
            + (
                f" + {data['n_corpus_title_pairs']} title→body pairs"
                if data.get("n_corpus_title_pairs")
                else ""
            )
        )
    if loss:
        lines.append("- loss: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in loss.items()))
    if config:
        params = ", ".join(f"{k} = {_fmt(config[k])}" for k in HYPER_PARAMETERS if config.get(k) is not None)
        lines.append(f"- hyper-parameters: {params}")
        lines.append(
            "- every option: `training_config` in the bundle's manifest.json / the run's config.json"
        )
    if not (data or loss or config):
        lines.append("- no training record: this model was indexed as given")
    return lines


def metrics_section(
    training_metrics: dict[str, Any] | None,
    test_metrics: dict[str, float] | None,
    *,
    title: str = "Evaluation",
    empty: str = "No evaluation recorded.",
) -> list[str]:
    """Base vs fine-tuned when the training metrics are recorded, else the test metrics, else `empty`."""
    lines = [f"## {title}", ""]
    base, tuned = (training_metrics or {}).get("base"), (training_metrics or {}).get("tuned")
    if base and tuned:
        lines += [
            f"Exact search over the whole corpus, pytrec_eval, {tuned.get('n_queries', '?')} held-out queries, "
            f"{tuned.get('n_docs', '?')} documents:",
            "",
            *markdown_table({"base": base, "fine-tuned": tuned}, change=True),
        ]
    elif test_metrics:
        lines += markdown_table({"value": test_metrics})
    else:
        lines.append(empty)
    return lines


def gap_section(report: dict[str, Any] | None) -> list[str]:
    lines = ["## Generalization gap (nats)", ""]
    if not report:
        return [*lines, "No gap report recorded."]
    k_suff = (report.get("k_sufficient") or {}).get("k")
    hoeffding = report.get("hoeffding_halfwidth") or {}
    lines += [
        f"InfoNCE risk at k = {report.get('k')} negatives ({report.get('k_rule', '')}), estimates with 95% "
        "bootstrap intervals (see report/report.json; docs/gap-report.md of infonce-search says how):",
        "",
        f"- risk on training queries: {_estimate(report.get('risk_train'))} "
        f"({report.get('n_train_queries')} queries)",
        f"- risk on held-out queries: {_estimate(report.get('risk_test'))} ({report.get('n_test_queries')} queries)",
        f"- gap (held-out − training): {_estimate(report.get('gap'))}",
        f"- Hoeffding half-width (a bound): {_fmt(hoeffding.get('value'), 3)}"
        + (" — vacuous" if hoeffding.get("vacuous") else ""),
        f"- negatives beyond which the risk stops falling (k_sufficient): {k_suff if k_suff is not None else 'not reached'}",
    ]
    return lines


def model_card(
    *,
    similarity: dict[str, Any],
    training_config: dict[str, Any],
    base_model: str,
    training_metrics: dict[str, Any] | None = None,
    test_metrics: dict[str, float] | None = None,
    report: dict[str, Any] | None = None,
    title: str = "",
) -> str:
    """The model folder's README.md (front matter for model hubs, then the sections)."""
    loss = record_section(training_config, "loss").get("loss") or similarity.get("metric", "cosine")
    loss_name = {"infonce": "InfoNCE", "aninfonce": "AnInfoNCE", "cosine": "InfoNCE"}.get(loss, loss)
    front = [
        "---",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        f"base_model: {base_model}",
        "tags: [sentence-transformers, feature-extraction, sentence-similarity, infonce-search]",
        "---",
        "",
        f"# {title or base_model + ' fine-tuned with ' + loss_name}",
        "",
        f"`{base_model}` fine-tuned with {loss_name} by infonce-search. This card is generated from the run's "
        "own records; it replaces the base model's card.",
        "",
    ]
    sections = [
        similarity_section(similarity),
        usage_section(),
        training_section(training_config, base_model),
        metrics_section(training_metrics, test_metrics),
        gap_section(report),
    ]
    return "\n".join(front + [line for s in sections for line in [*s, ""]]).rstrip() + "\n"


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON object a run or bundle records (config.json, similarity.json, report.json …); None when the
    file is absent or holds something else."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


def write_run_card(run_dir: str | Path) -> Path:
    """`<run>/model/README.md` from the run's config.json, metrics.json, similarity.json and report."""
    run = Path(run_dir)
    config = read_record(run / "config.json") or {}
    base = config.get("base_model")
    base_name = str(base.get("name") if isinstance(base, dict) else base or "all-MiniLM-L6-v2")
    card = model_card(
        similarity=read_record(run / "model" / "similarity.json") or {},
        training_config=config,
        base_model=base_name,
        training_metrics=read_record(run / "metrics.json"),
        report=read_record(run / "report" / "report.json"),
        title=f"{run.name}: {base_name} fine-tuned",
    )
    return write_text_atomic(run / "model" / CARD_FILE, card)
