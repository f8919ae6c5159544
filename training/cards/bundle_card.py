"""The cards of a bundle: `README.md` (what the bundle is, how it was trained and evaluated, the gate's
decision, its index's recall, how to load and query it) and `model/README.md` (training.cards.model_card).

The model card is written while the bundle is built (it is checksummed with the model); the bundle
card at publication, beside gate.json, because it reports the gate's decision. Like gate.json it is
derived from checksummed records and is itself left out of the checksums.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.cards.metrics_table import markdown_table
from training.cards.model_card import (
    CARD_FILE,
    gap_section,
    metrics_section,
    model_card,
    read_record,
    record_section,
    write_text_atomic,
)


def write_bundle_model_card(
    folder: Path,
    *,
    training_config: dict[str, Any],
    base_model: str,
    metrics: dict[str, dict[str, float]],
    extras: dict[str, Any],
) -> Path:
    """`<bundle>/model/README.md` from what the manifest will record (called before its checksums)."""
    card = model_card(
        similarity=read_record(folder / "model" / "similarity.json") or {},
        training_config=training_config,
        base_model=base_model,
        training_metrics=extras.get("training_metrics"),
        test_metrics=metrics.get("test"),
        report=read_record(folder / "report" / "report.json"),
    )
    return write_text_atomic(folder / "model" / CARD_FILE, card)


def bundle_card(manifest: dict[str, Any], gate: dict[str, Any] | None, report: dict[str, Any] | None) -> str:
    lines = [
        *_summary(manifest),
        *metrics_section(
            None,
            (manifest.get("metrics") or {}).get("test"),
            title="Evaluation (exact search, the gate's numbers)",
            empty="No test metrics recorded.",
        ),
        *_feedback((manifest.get("extras") or {}).get("feedback")),
        *_gate(gate),
        *_index(manifest),
        "",
        *gap_section(report),
        "",
        *_how_to_use(manifest["version"]),
    ]
    return "\n".join(lines) + "\n"


def _feedback(record: dict[str, Any] | None) -> list[str]:
    """What a retrain did with the relevance judgments, and the held-out judged queries' nDCG@10 of this
    candidate and of the version live when it was built (training/feedback/use.py)."""
    if not record:
        return []
    lines = ["", "## Relevance feedback", "", f"Judgments: {record.get('use')} ({record.get('reason')})."]
    if "train_pairs" in record:
        lines.append(
            f"{record['train_pairs']} judged pairs of {record['train_queries']} queries trained, with "
            f"{record['hard_negatives']} shown-above hard negatives; {record['heldout_queries']} judged "
            "queries held out."
        )
    held = record.get("heldout")
    if held:
        columns = {"candidate": {"ndcg@10": held["candidate_ndcg@10"]}}
        if held.get("live_ndcg@10") is not None:
            columns[f"live {held['live_version']}"] = {"ndcg@10": held["live_ndcg@10"]}
        lines += [
            "",
            f"Held-out judged queries ({held['queries']}), exact search:",
            "",
            *markdown_table(columns),
        ]
    return lines


def _summary(manifest: dict[str, Any]) -> list[str]:
    """Title, what a bundle holds, and where this one came from (code, base model, loss, evaluation data)."""
    metric = manifest.get("metric") or {}
    extras = manifest.get("extras") or {}
    code = manifest.get("code_version") or {}
    loss = record_section(manifest.get("training_config") or {}, "loss")
    fingerprint = extras.get("eval_fingerprint")
    return [
        f"# infonce-search bundle {manifest['version']}",
        "",
        "A versioned, checksummed search bundle: a fine-tuned sentence encoder (`model/`, its own card in "
        "`model/README.md`), a FAISS index of the corpus (`index.faiss`, row i = `ids.json`[i]), the documents "
        "(`docs.sqlite`), the generalization-gap report (`report/`) and `manifest.json`, which records "
        "everything below and the sha256 of every file.",
        "",
        f"- created {manifest.get('created_at', '?')} by infonce-search {code.get('package', '?')}"
        + (f" (git {code['git_sha'][:12]})" if code.get("git_sha") else ""),
        f"- base model `{manifest.get('base_model', '?')}`, loss {loss.get('loss', 'none recorded')}, "
        f"similarity {metric.get('similarity', '?')}, dimension {manifest.get('dim', '?')}",
        f"- evaluated on `{extras.get('data', '?')}`, split `{extras.get('split', '?')}`"
        + (f" (evaluation set sha256 {str(fingerprint)[:12]}…)" if fingerprint else ""),
        "",
    ]


def _gate(gate: dict[str, Any] | None) -> list[str]:
    lines = ["", "## Quality gate", ""]
    if not gate:
        return [*lines, "Not published yet: no gate decision."]
    verdict = "accepted (made live)" if gate.get("accepted") else "kept as a candidate (not made live)"
    return [
        *lines,
        f"- decision: **{verdict}**{' (forced)' if gate.get('forced') else ''}: {gate.get('reason')}",
        f"- test {gate.get('metric')}: candidate {gate.get('candidate_value')}, live then "
        f"{gate.get('live_version') or 'none'} ({gate.get('live_value')}), tolerance {gate.get('tolerance')}",
        "- which version is live now is what the bundles folder's CURRENT names (gate.json keeps this decision)",
    ]


def _index(manifest: dict[str, Any]) -> list[str]:
    """The index's kind, size and measured recall, and the ONNX query encoders beside it."""
    index = manifest.get("index") or {}
    recall = index.get("recall_at_10")
    lines = [
        "",
        "## Index",
        "",
        f"- `{index.get('factory', '?')}` ({index.get('kind', '?')}, FAISS metric {index.get('metric', '?')}), "
        f"{index.get('ntotal', manifest.get('n_vectors', '?'))} vectors, "
        f"{index.get('bytes_per_vector', 0):.0f} bytes per vector",
        "- recall@10 vs exact search: "
        + (
            "1 (exact index)"
            if recall is None
            else f"{recall:.4f} on {index.get('tune_queries', '?')} real queries"
        ),
    ]
    onnx = (manifest.get("extras") or {}).get("onnx")
    if isinstance(onnx, dict):
        losses = {k: v for k, v in onnx.items() if k.endswith("ndcg_loss") or k == "ndcg_loss"}
        lines.append(
            f"- ONNX query encoders: {', '.join(onnx.get('files', {}))}" + (f" ({losses})" if losses else "")
        )
    return lines


def _how_to_use(version: str) -> list[str]:
    return [
        "## How to load and query",
        "",
        "Serve it (the folder holding this version and its CURRENT file):",
        "",
        "```bash",
        "SEARCH_BUNDLES_DIR=path/to/bundles uvicorn --factory app.main:create_app",
        'curl -s localhost:8000/search -H \'content-type: application/json\' -d \'{"query": "...", "top_k": 5}\'',
        'curl -s localhost:8000/embed -H \'content-type: application/json\' -d \'{"input": ["..."], "kind": "query"}\'',
        "```",
        "",
        "From Python, through the server (`pip install infonce-search`):",
        "",
        "```python",
        "from infonce_search import Client",
        "",
        'with Client("http://localhost:8000") as client:',
        '    hits = client.search("...", top_k=5).results[0].hits',
        "```",
        "",
        "Or in process, without a server (checks every checksum first):",
        "",
        "```python",
        "from contract.bundles.bundle import load_bundle",
        "",
        f'bundle = load_bundle("path/to/bundles/{version}")',
        'query = bundle.encoder.to_index_space(bundle.encoder.encode(["..."], kind="query"))',
        "(positions, scores), = bundle.index.search(query, 5)",
        "ids = [bundle.doc_ids[p] for p in positions]",
        "```",
        "",
        "The encoder alone: see `model/README.md`.",
    ]


def write_bundle_card(folder: Path, manifest: dict[str, Any], gate: dict[str, Any] | None) -> Path:
    """`<bundle>/README.md` (at publication, with the gate's decision)."""
    report = read_record(folder / "report" / "report.json")
    return write_text_atomic(folder / CARD_FILE, bundle_card(manifest, gate, report))
