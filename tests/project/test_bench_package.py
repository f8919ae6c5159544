"""bench/ is a package with one entry point (`python -m bench`): every bench listed, importable without
running anything, no sys.path edits, no imports of tests/ or of another package's private names, and no
folder a hall of modules. Nothing here runs a bench."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from bench.catalog import BENCHES

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
MAX_MODULES_PER_FOLDER = 15
FILES = sorted(BENCH.rglob("*.py"))


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_bench_module_is_in_the_catalog_or_imported_by_one():
    """A module under bench/ that no one can run or import would be an attic again."""
    listed = set(BENCHES.values())
    helpers = {
        m for m in map(_module, FILES) if m.startswith(("bench.harness", "bench.catalog")) or "." not in m
    }
    helpers |= {"bench.__main__", "bench.serving.corpora_load", "bench.serving.naive_app"}
    helpers |= {_module(f) for f in FILES if f.name == "__init__.py"}
    assert set(map(_module, FILES)) - listed - helpers == set()


@pytest.mark.parametrize("module", sorted({_module(f) for f in FILES} - {"bench.__main__"}))
def test_every_bench_module_imports_without_running(module, capsys):
    """Import does no work: nothing printed, and `main` is there to be called by `python -m bench`."""
    mod = importlib.import_module(module)
    assert capsys.readouterr().out == ""
    if module in BENCHES.values():
        assert callable(mod.main)


def test_python_m_bench_lists_every_bench():
    out = subprocess.run(
        [sys.executable, "-m", "bench"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert listed == set(BENCHES)
    assert all(line.split(maxsplit=1)[1:] for line in out.splitlines() if line.startswith("  ")), out


def test_an_unknown_bench_is_refused_with_the_list():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "no_such_bench"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "load_bench" in done.stderr


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_sys_path_edit_no_tests_import_no_private_name(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert (node.value.id, node.attr) != ("sys", "path"), f"{path}: edits sys.path"
    for module, names in _imports(tree):
        assert module.split(".")[0] != "tests", f"{path}: imports {module}"
        if module.split(".")[0] != "bench":
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            assert not private, f"{path}: imports private {private} from {module}"


def test_no_bench_folder_has_more_than_15_modules():
    for folder in [BENCH, *(p for p in BENCH.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        n = len([f for f in folder.glob("*.py") if f.name != "__init__.py"])
        assert n <= MAX_MODULES_PER_FOLDER, f"{folder.relative_to(REPO)}: {n} modules"


def test_no_bench_function_is_over_60_lines():
    long = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_def = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_def and node.end_lineno and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{path.relative_to(REPO)}:{node.name}")
    assert long == []


def test_recipe_cost_reproduces_its_committed_result(capsys):
    """The cheapest bench, for real: from the committed recipe-search rows it prints the committed table."""
    from bench.training import recipe_cost

    names = "gc-default,gc-1neg,gc-doc64"
    results = BENCH / "results"
    recipe_cost.main(
        [f"{results / 'recipe_search_demo.json'}:{names}", f"{results / 'recipe_search.json'}:{names}"]
    )
    assert capsys.readouterr().out == (results / "recipe_cost.txt").read_text()
