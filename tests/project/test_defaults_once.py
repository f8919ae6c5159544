"""Each shared default is defined once, in contract/defaults.py (issue: one home per default). The code is
read with `ast`: a parameter default, a pydantic `Field(...)` / typer `Option(...)` default, a class or
module attribute, or a keyword argument whose *name* says what it is (keep, target_recall, gate_metric,
tolerance, max_ndcg_loss, collection, the search limits) may not carry the literal again; it reads the constant."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "contract", "training")
HOME = "contract/defaults.py"
# name -> the literal that may appear only in HOME for a parameter / field of that name
SHARED = {
    "keep": 5,
    "target_recall": 0.95,
    "gate_metric": "ndcg@10",
    "tolerance": 0.005,
    "gate_tolerance": 0.005,
    "max_ndcg_loss": 0.005,
    "MAX_NDCG_LOSS": 0.005,
    "collection": "default",
    "max_top_k": 1000,
    "MAX_DEPTH": 1000,
    "max_query_chars": 2048,
    "MAX_QUERY_CHARS": 2048,
}


def _default_value(node: ast.expr | None) -> object:
    """The literal a default expression carries: `5`, or the first argument of `Field(5, …)` / `Option(5, …)`."""
    if (
        isinstance(node, ast.Call)
        and node.args
        and getattr(node.func, "attr", getattr(node.func, "id", ""))
        in (
            "Field",
            "Option",
        )
    ):
        node = node.args[0]
    if isinstance(node, ast.Constant):
        return node.value
    return None


def _named_defaults(tree: ast.AST):
    """(name, default expression, line) for every parameter default, annotated/plain assignment and keyword."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(
                positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
            ):
                yield arg.arg, default, default.lineno
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if default is not None:
                    yield arg.arg, default, default.lineno
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield node.target.id, node.value, node.lineno
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value, node.lineno
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg, node.value, node.value.lineno


def repeated_defaults(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for name, value, line in _named_defaults(tree):
        literal = _default_value(value)
        if (
            name in SHARED
            and literal is not None
            and literal == SHARED[name]
            and type(literal) is type(SHARED[name])
        ):
            found.append(f"{path.relative_to(root)}:{line} {name}={literal!r}")
    return found


def test_every_shared_default_is_typed_only_in_contract_defaults():
    found = [
        hit
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if str(path.relative_to(REPO)) != HOME
        for hit in repeated_defaults(path)
    ]
    assert found == []


def test_the_check_finds_each_form_it_forbids(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(*, keep: int = 5, target_recall=0.95): ...\n"
        "class C:\n    gate_metric: str = Field('ndcg@10', description='')\n"
        "MAX_NDCG_LOSS = 0.005\n"
        "g(collection='default', keep=KEEP_VERSIONS, level=0.95)\n"
    )
    hits = sorted(h.split(" ", 1)[1] for h in repeated_defaults(probe, root=tmp_path))
    assert hits == sorted(
        [
            "keep=5",
            "target_recall=0.95",
            "gate_metric='ndcg@10'",
            "MAX_NDCG_LOSS=0.005",
            "collection='default'",
        ]
    )
