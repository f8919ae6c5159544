"""A code-search dataset built from the running Python's standard library: prose queries, code documents.

The other corpora pair prose with prose; here a description has to find source code (the task of
CodeSearchNet, Husain et al. 2019). Each documented public function or method of the standard library's
own source files gives one retrieval pair:

- query    = its docstring's one-line summary ("Return the number of items in the queue.");
- document = its source code with the docstring removed (the query is never inside its own document),
             dedented, titled with the qualified name (`queue.Queue.qsize`).

The files are parsed with `ast`, never imported (training/data/demo_data.py says why, and its file walk and
skipped folders are reused). Functions whose code is too short (a `pass` or one `return`), duplicate
summaries or code, and code that contains its own summary are dropped (the first in sorted file order is
kept). A seeded sample of `n_docs` functions forms the corpus and their queries are split into disjoint,
seeded train and test sets (demo_data's writer). The output is byte-identical for the same Python
installation, size and seed.
"""

from __future__ import annotations

import ast
import functools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from training.data.demo_data import (
    DistinctPairs,
    DocPair,
    files_table,
    sample_and_write,
    source_files,
    stdlib_dir,
)

DEFAULT_DOCS = 1500  # of 2,076 usable functions in Python 3.11.7: 1,200 train + 300 test queries
DEFAULT_TEST_QUERIES = 300
DEFAULT_SEED = 0
MIN_SUMMARY_WORDS = 4
MIN_CODE_TOKENS = 15  # whitespace-separated pieces of code: fewer is a stub (`return self._x`)
MAX_CODE_CHARS = 1000  # as the demo dataset: about the 256 tokens the encoder reads


def function_code(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> str:
    """The function's source (decorators and signature included) without its docstring, dedented."""
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    end = node.end_lineno or node.lineno
    drop: set[int] = set()
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        drop = set(range(first.lineno - 1, (first.end_lineno or first.lineno)))
    kept = [lines[i] for i in range(start, end) if i not in drop]
    return textwrap.dedent("\n".join(kept)).strip()


def _functions(tree: ast.Module, module: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every public function and method (nested classes included)."""
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, prefix = stack.pop(0)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if child.name.startswith("_"):
                continue
            name = f"{prefix}.{child.name}"
            if isinstance(child, ast.ClassDef):
                stack.append((child, name))
            else:
                yield name, child


def harvest(root: Path | None = None) -> list[DocPair]:
    """Every usable (name, summary, code) of the standard library under root, deduplicated, in file order."""
    return list(_harvest(root or stdlib_dir()))


@functools.lru_cache(maxsize=4)
def _harvest(root: Path) -> tuple[DocPair, ...]:  # parsing ~1k files takes seconds: once per process
    if not root.is_dir():
        raise FileNotFoundError(
            f"{root}: no Python standard library source here (install python3 to build this)"
        )
    distinct = DistinctPairs(MIN_SUMMARY_WORDS, MIN_CODE_TOKENS)
    pairs: list[DocPair] = []
    for module, path in source_files(root):
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source, filename=str(path))
        except (SyntaxError, ValueError, UnicodeDecodeError):  # templates, other versions, other encodings
            continue
        lines = source.splitlines()
        for name, node in _functions(tree, module):
            doc = ast.get_docstring(node, clean=True)
            if not doc:
                continue
            summary = " ".join(doc.strip().split("\n\n", 1)[0].split())
            code = function_code(node, lines)
            if len(code) > MAX_CODE_CHARS:
                code = code[:MAX_CODE_CHARS].rsplit("\n", 1)[0]
            if distinct.admit(summary, code):
                pairs.append(DocPair(name, summary, code))
    return tuple(pairs)


def build_code_dataset(
    out_dir: str | Path,
    *,
    n_docs: int = DEFAULT_DOCS,
    n_test: int = DEFAULT_TEST_QUERIES,
    seed: int = DEFAULT_SEED,
    root: Path | None = None,
) -> Path:
    """Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv, README.md) to out_dir.

    FileNotFoundError when `root` is not a folder; written to a temp folder and renamed into place."""
    return sample_and_write(
        out_dir,
        harvest(root),
        n_docs=n_docs,
        n_test=n_test,
        seed=seed,
        readme=_readme,
        what="code-search dataset",
    )


def _readme(n_usable: int, n_docs: int, n_train: int, n_test: int, seed: int) -> str:
    version = ".".join(str(v) for v in sys.version_info[:3])
    return f"""# pycode: Python {version} standard-library functions as a code-search dataset

Built by training/data/code_search.py from the `.py` files of this Python's standard library, parsed with
`ast` (nothing imported). Deterministic: the same Python, size and seed give byte-identical files.

- **query**: the one-line summary of a public function's or method's docstring;
- **relevant document**: that function's source code without its docstring (dedented, cut at
  {MAX_CODE_CHARS} characters on a line boundary), titled with its qualified name (e.g. `queue.Queue.qsize`);
- kept: summaries of at least {MIN_SUMMARY_WORDS} words and code of at least {MIN_CODE_TOKENS} tokens; duplicate
  summaries or code, and code that repeats its summary, are dropped (tests, idlelib, lib2to3 and
  turtledemo are skipped);
- {n_usable} usable functions; a sample of {n_docs} (seed {seed}) forms the corpus, one relevant document per query.

{files_table(n_docs, n_train, n_test, seed)}"""
