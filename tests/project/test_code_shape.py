"""The code's shape, checked so it does not drift back (issue: one plan, helpers once): no function over
60 lines outside tests, no production function with more than 8 parameters, and no folder with more than
15 modules at its top (bench/ and tests/ included). Read with `ast`; nothing is executed."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = ("app", "contract", "training", "infonce_search")
MAX_LINES = 60
MAX_PARAMS = 8
MAX_MODULES = 15
# signatures another library fixes: the override must take what the base class passes
INTERFACE = {
    "infonce_search/integrations/langchain.py:from_texts": "langchain's VectorStore.from_texts signature",
}
SKIP = {".venv", "node_modules", "var", "build", "dist", "site"}


def _python_files(*tops: str) -> list[Path]:
    return [
        f
        for top in tops
        for f in sorted((REPO / top).rglob("*.py"))
        if not SKIP.intersection(f.relative_to(REPO).parts)
    ]


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_outside_tests_is_longer_than_60_lines():
    long = [
        f"{f.relative_to(REPO)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for f in _python_files(*PRODUCTION, "bench", "scripts")
        for fn in _functions(f)
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_LINES
    ]
    assert long == []


def test_no_production_function_takes_more_than_8_parameters():
    wide = [
        f"{f.relative_to(REPO)}:{fn.lineno} {fn.name} ({_params(fn)} parameters)"
        for f in _python_files(*PRODUCTION)
        for fn in _functions(f)
        if _params(fn) > MAX_PARAMS and f"{f.relative_to(REPO)}:{fn.name}" not in INTERFACE
    ]
    assert wide == []


def test_no_folder_has_more_than_15_modules_at_its_top():
    folders = {f.parent for f in _python_files(*PRODUCTION, "bench", "tests", "scripts")}
    crowded = {
        str(folder.relative_to(REPO)): n
        for folder in folders
        if (n := len([f for f in folder.glob("*.py") if f.name != "__init__.py"])) > MAX_MODULES
    }
    assert crowded == {}


def test_the_checks_see_what_they_count(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("class C:\n    def m(self, a, b, *c, d, **e):\n" + "        x = 1\n" * 60)
    (fn,) = [n for n in _functions(probe) if n.name == "m"]
    assert _params(fn) == 5
    assert fn.end_lineno - fn.lineno + 1 == 61
