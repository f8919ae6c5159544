"""The metrics table, rendered in one place: the cards' Markdown table (`| metric | base | fine-tuned |
change |` or `| metric | value |`) and the fixed-width one `train` and `pipeline` print. A row per
retrieval metric recorded in every column, in METRIC_NAMES' order."""

from __future__ import annotations

from collections.abc import Mapping

METRIC_NAMES = ("ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100")
Column = Mapping[str, float]  # metric name -> value


def metric_rows(columns: Mapping[str, Column], *, change: bool) -> list[tuple[str, list[float]]]:
    """(metric, its value in each column [, last column − first]) for each metric every column has."""
    values = list(columns.values())
    rows = []
    for name in METRIC_NAMES:
        if all(name in column for column in values):
            row = [column[name] for column in values]
            rows.append((name, [*row, row[-1] - row[0]] if change else row))
    return rows


def markdown_table(columns: Mapping[str, Column], *, change: bool = False) -> list[str]:
    """The cards' table, one line per list item: `| metric | <column> … [| change] |`, 4 decimals (a
    change signed)."""
    header = ["metric", *columns, *(["change"] if change else [])]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for name, row in metric_rows(columns, change=change):
        cells = [f"{v:.4f}" for v in row[: len(columns)]] + [f"{v:+.4f}" for v in row[len(columns) :]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def text_table(base: Column, tuned: Column) -> str:
    """The terminal's base-vs-tuned table (`train`, `pipeline`): fixed-width columns, the change signed."""
    lines = [f"{'metric':<11}{'base':>8}{'tuned':>8}{'change':>9}"]
    for name, (b, t, delta) in metric_rows({"base": base, "tuned": tuned}, change=True):
        lines.append(f"{name:<11}{b:>8.4f}{t:>8.4f}{delta:>+9.4f}")
    return "\n".join(lines)
