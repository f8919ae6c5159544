"""A small real retrieval dataset built from the running Python's standard library docstrings.

`make demo` needs a dataset that every machine with Python already has. Each documented function, class
or method of the standard library's own source files gives one retrieval pair:

- query    = the docstring's one-line summary ("Return the number of items in the queue.");
- document = the rest of the docstring, with the summary removed (so the query is never a substring of
             its own document), title = the object's qualified name (`queue.Queue.qsize`).

The source files are parsed with `ast`, never imported: importing `antigravity` opens a browser, `this`
prints, and imports differ by platform. Objects with too little text, duplicate summaries or duplicate
bodies are dropped (the first in sorted file order is kept); a seeded sample of `n_docs` objects forms the
corpus, and their queries are split into disjoint, seeded train and test sets. Every document is the
positive of exactly one query, so the test split's documents act as distractors while training and vice
versa. The output is byte-identical for the same Python installation, size and seed.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import os
import random
import re
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from training.data.beir import CORPUS_FILE, QRELS_DIR, QUERIES_FILE

logger = logging.getLogger(__name__)

DEFAULT_DOCS = 1100  # 800 train + 300 test queries; chosen by bench/serving/demo_bench.py
DEFAULT_TEST_QUERIES = 300
DEFAULT_SEED = 0
MIN_SUMMARY_WORDS = 4
MIN_BODY_WORDS = 12
MAX_BODY_CHARS = 1000  # longer bodies are cut at a word boundary: about the 256 tokens the encoder reads
# the standard library's tests, demos, tools and vendored or legacy packages are not its API documentation
SKIP_DIRS = frozenset(
    {"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages", "dist-packages", "__pycache__"}
)


@dataclass(frozen=True)
class DocPair:
    """One documented object: its qualified name, summary line (the query) and remaining text."""

    name: str
    summary: str
    body: str


def stdlib_dir() -> Path:
    """The folder of the running interpreter's pure-Python standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def source_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every .py file under root, in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            path = Path(dirpath) / filename
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts:
                yield ".".join(parts), path


def _split_docstring(doc: str) -> tuple[str, str] | None:
    """(summary line, body with single spaces) of a cleaned docstring, or None if it has no body."""
    paragraphs = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)
    if len(paragraphs) < 2:
        return None
    summary = " ".join(paragraphs[0].split())
    body = " ".join(paragraphs[1].split())
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS].rsplit(" ", 1)[0]
    return summary, body


def _documented(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of every documented public class, function and method."""
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, prefix = stack.pop(0)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if child.name.startswith("_"):
                continue
            name = f"{prefix}.{child.name}"
            doc = ast.get_docstring(child, clean=True)
            if doc:
                yield name, doc
            if isinstance(child, ast.ClassDef):
                stack.append((child, name))


class DistinctPairs:
    """The pairs a harvester keeps: a summary and a body of at least the given words, neither seen
    before, and the summary not inside its own body (the query would be a substring of its answer)."""

    def __init__(self, min_summary_words: int, min_body_words: int) -> None:
        self.min_summary_words, self.min_body_words = min_summary_words, min_body_words
        self._summaries: set[str] = set()
        self._bodies: set[str] = set()

    def admit(self, summary: str, body: str) -> bool:
        """True (and remembered) for a usable, new pair; False otherwise."""
        if len(summary.split()) < self.min_summary_words or len(body.split()) < self.min_body_words:
            return False
        key = summary.lower()
        if key in self._summaries or body in self._bodies or key in body.lower():
            return False
        self._summaries.add(key)
        self._bodies.add(body)
        return True


def harvest(root: Path | None = None) -> list[DocPair]:
    """Every usable (name, summary, body) of the standard library under root, deduplicated, in file order."""
    return list(_harvest(root or stdlib_dir()))


@functools.lru_cache(maxsize=4)
def _harvest(root: Path) -> tuple[DocPair, ...]:  # parsing ~1k files takes seconds: once per process
    pairs: list[DocPair] = []
    distinct = DistinctPairs(MIN_SUMMARY_WORDS, MIN_BODY_WORDS)
    for module, path in source_files(root):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):  # a few files are templates or for other versions
            continue
        for name, doc in _documented(tree, module):
            parts = _split_docstring(doc)
            if parts is None:
                continue
            summary, body = parts
            if distinct.admit(summary, body):
                pairs.append(DocPair(name, summary, body))
    return tuple(pairs)


def build_demo_dataset(
    out_dir: str | Path,
    *,
    n_docs: int = DEFAULT_DOCS,
    n_test: int = DEFAULT_TEST_QUERIES,
    seed: int = DEFAULT_SEED,
    root: Path | None = None,
    modules: Sequence[str] | None = None,
) -> Path:
    """Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv, README.md) to out_dir.

    `modules`: only the docstrings of these top-level packages (`email`, `http` …): one package family,
    for a collection of its own (the demo's second collection). Files are written to a sibling temp folder
    and renamed into place, so a crash leaves no half dataset.
    """
    pairs = harvest(root)
    if modules:
        wanted = set(modules)
        pairs = [p for p in pairs if p.name.split(".")[0] in wanted]
        if len(pairs) < 2:
            raise ValueError(f"modules {', '.join(sorted(wanted))}: fewer than 2 usable docstrings")
    listed = ", ".join(sorted(set(modules or ())))
    suffix = f"\nOnly the docstrings of these standard-library packages: {listed}.\n" if modules else ""

    def readme(*counts: int) -> str:
        return _readme(*counts) + suffix

    return sample_and_write(
        out_dir, pairs, n_docs=n_docs, n_test=n_test, seed=seed, readme=readme, what="demo dataset"
    )


def sample_and_write(
    out_dir: str | Path,
    pairs: Sequence[DocPair],
    *,
    n_docs: int,
    n_test: int,
    seed: int,
    readme: Callable[[int, int, int, int, int], str],
    what: str,
) -> Path:
    """A seeded sample of `n_docs` pairs as a BEIR folder with disjoint, seeded train / test queries.

    `readme(n_usable, n_docs, n_train, n_test, seed)` is the folder's README.md. Written to a sibling temp
    folder and renamed into place, so a crash leaves no half dataset (training/data/man_pages.py shares it).
    """
    out = Path(out_dir)
    if len(pairs) < n_docs:
        logger.warning(
            "only %d usable pairs for the %s (asked for %d): using all of them", len(pairs), what, n_docs
        )
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(len(pairs)), min(n_docs, len(pairs))))
    chosen = [pairs[i] for i in picked]
    if n_test >= len(chosen):
        raise ValueError(f"n_test={n_test} leaves no training queries among {len(chosen)} documents")
    order = list(range(len(chosen)))
    rng.shuffle(order)
    test = set(order[:n_test])

    corpus_lines, query_lines = [], []
    qrels: dict[str, list[str]] = {"train": [], "test": []}
    for i, pair in enumerate(chosen):
        doc_id, query_id = f"d{i}", f"q{i}"
        corpus_lines.append(json.dumps({"_id": doc_id, "title": pair.name, "text": pair.body}))
        query_lines.append(json.dumps({"_id": query_id, "text": pair.summary}))
        qrels["test" if i in test else "train"].append(f"{query_id}\t{doc_id}\t1")

    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        _remove_tree(partial)
    (partial / QRELS_DIR).mkdir(parents=True)
    (partial / CORPUS_FILE).write_text("\n".join(corpus_lines) + "\n", encoding="utf-8")
    (partial / QUERIES_FILE).write_text("\n".join(query_lines) + "\n", encoding="utf-8")
    for split, rows in qrels.items():
        text = "query-id\tcorpus-id\tscore\n" + "".join(r + "\n" for r in rows)
        (partial / QRELS_DIR / f"{split}.tsv").write_text(text, encoding="utf-8")
    text = readme(len(pairs), len(chosen), len(qrels["train"]), len(qrels["test"]), seed)
    (partial / "README.md").write_text(text, encoding="utf-8")
    if out.exists():
        _remove_tree(out)
    partial.rename(out)
    logger.info(
        "%s: %d documents, %d train / %d test queries in %s",
        what,
        len(chosen),
        *map(len, qrels.values()),
        out,
    )
    return out


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def files_table(n_docs: int, n_train: int, n_test: int, seed: int) -> str:
    """The README's table of the files sample_and_write writes (every dataset built with it ends with one)."""
    return f"""| file | rows |
|---|---|
| `corpus.jsonl` | {n_docs} documents `{{"_id", "title", "text"}}` |
| `queries.jsonl` | {n_docs} queries `{{"_id", "text"}}` |
| `qrels/train.tsv` | {n_train} queries, one relevant document each |
| `qrels/test.tsv` | {n_test} queries, disjoint from train (seed {seed}) |
"""


def _readme(n_usable: int, n_docs: int, n_train: int, n_test: int, seed: int) -> str:
    version = ".".join(str(v) for v in sys.version_info[:3])
    return f"""# pydocs: Python {version} standard-library docstrings as a retrieval dataset

Built by `python -m training demo-data` (training/data/demo_data.py) from the `.py` files of this Python's
standard library, parsed with `ast` (nothing imported). Deterministic: the same Python, size and seed give
byte-identical files.

- **query**: the one-line summary of a public function's, class's or method's docstring;
- **relevant document**: the rest of that docstring (summary removed, whitespace collapsed, cut at
  {MAX_BODY_CHARS} characters), titled with the object's qualified name (e.g. `queue.Queue.qsize`);
- kept: summaries of at least {MIN_SUMMARY_WORDS} words and bodies of at least {MIN_BODY_WORDS} words; duplicate summaries
  or bodies, and bodies that repeat their summary, are dropped (tests, idlelib, lib2to3 and turtledemo
  are skipped);
- {n_usable} usable objects; a sample of {n_docs} (seed {seed}) forms the corpus, one relevant document per query.

{files_table(n_docs, n_train, n_test, seed)}"""
