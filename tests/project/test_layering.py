"""Import direction (docs/architecture.md): training never imports app; contract imports neither;
the whole import closure of app (every import, at any depth, module level or inside a function) stays
inside app and contract; no import circles. Imports are read with `ast`, so nothing is executed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "contract", "training")


def imports_of(path: Path) -> set[str]:
    """Absolute module names imported by one file (`from training import errors` -> training.errors)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _files(package: str) -> list[Path]:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no python files under {package}/"
    return files


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the repo modules it imports (a name that is not a module, `from m import f`, counts as m)."""
    modules = {module_name(f): f for package in PACKAGES for f in _files(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imports_of(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def closure(graph: dict[str, set[str]], roots: set[str]) -> set[str]:
    """Every module reachable from roots, with the parent packages Python runs on the way."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)]
        todo.extend(graph.get(name, set()) | {p for p in parents if p in graph})
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_training_never_imports_app():
    offenders = {
        str(f.relative_to(REPO)): sorted(m for m in imports_of(f) if m == "app" or m.startswith("app."))
        for f in _files("training")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_contract_imports_neither_training_nor_app():
    offenders = {
        str(f.relative_to(REPO)): sorted(m for m in imports_of(f) if m.split(".")[0] in ("training", "app"))
        for f in _files("contract")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_import_closure_of_app_holds_no_training_module():
    graph = import_graph()
    reached = closure(graph, {m for m in graph if m.split(".")[0] == "app"})
    assert sorted(m for m in reached if m.split(".")[0] == "training") == []


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_closure_and_cycles_see_function_level_imports(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "d.e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert closure(graph, {"d.e"}) == {"d.e", "d", "a", "b", "c"}
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from training import trainer\n")
    assert imports_of(probe) == {"training", "training.trainer"}


def test_imports_of_reads_both_import_forms(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import training.data\nfrom training import trainer\nfrom . import sibling\n")
    assert imports_of(probe) == {"training.data", "training", "training.trainer"}


def test_importing_the_app_loads_no_model_library():
    code = (
        "import sys, app.main; "
        "loaded = [m for m in ('torch', 'sentence_transformers', 'transformers', 'onnxruntime') if m in sys.modules]; "
        "print(loaded, hasattr(app.main, 'app'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] False"  # no model at import, and no module-level `app = create_app()`


# Each package's subpackages in layer order, lowest first: a module may import its own layer and the
# layers below it, never one above (docs/architecture.md draws the same order). BASE modules sit below
# every layer and import none; ENTRY modules sit above them all.
LAYERS = {
    "training": [
        "data", "eval", "losses", "gap", "hybrid", "cards", "train", "export", "bundle", "distill",
        "feedback", "publish", "jobs", "cli", "experiments",
    ],
    "contract": ["encoding", "index", "bundles", "mutations", "milvus", "jobs", "feedback"],
    "app": ["schemas", "engine", "live", "api"],
}  # fmt: skip
BASE = {
    "training": set(),
    "contract": {
        "errors",
        "atomic",
        "durable_sqlite",
        "defaults",
        "limits",
        "config",
        "query_config",
        "log_setup",
    },
    "app": {"errors", "field_errors", "metrics", "settings"},
}
ENTRY = {
    "training": {"__main__"},
    "contract": set(),
    "app": {"main", "healthcheck", "serve", "worker_sockets"},
}
MAX_MODULES_PER_FOLDER = 15


def _place(module: str) -> tuple[str, str]:
    """('layer', name) for a module in a layer, ('base' | 'entry', name) for a top-level module."""
    package, _, rest = module.partition(".")
    head = rest.split(".")[0]
    if head in LAYERS[package]:
        return "layer", head
    if head in BASE[package]:
        return "base", head
    assert head in ENTRY[package] or not rest, f"{module}: neither in a layer nor a known top-level module"
    return "entry", head


def test_every_layer_imports_only_its_own_and_lower_layers():
    upward = []
    for module, targets in import_graph().items():
        package = module.split(".")[0]
        kind, name = _place(module)
        for target in targets:
            if target.split(".")[0] != package or target == package:
                continue
            t_kind, t_name = _place(target)
            if kind == "entry" or t_kind == "base":
                ok = kind == "entry" or kind == "layer" or (kind == "base" and t_kind == "base")
            elif kind == "layer" and t_kind == "layer":
                ok = LAYERS[package].index(t_name) <= LAYERS[package].index(name)
            else:
                ok = False
            if not ok:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_every_layer_folder_exists_and_no_folder_is_a_hall():
    for package, layers in LAYERS.items():
        for layer in layers:
            assert (REPO / package / layer / "__init__.py").is_file(), f"{package}/{layer}/ is missing"
    crowded = {
        str(folder.relative_to(REPO)): n
        for package in PACKAGES
        for folder in [REPO / package, *(p for p in (REPO / package).rglob("*") if p.is_dir())]
        if (n := len([f for f in folder.glob("*.py") if f.name != "__init__.py"])) > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}


def test_the_architecture_map_names_every_module_and_only_those():
    """docs/architecture.md's module map (its first code block) lists each module under its folder."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("```\n", 2)[1]
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, folder path) of the enclosing folder headers
    for line in block.splitlines():
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        name = stripped.split(" ", 1)[0]
        if not name.endswith((".py", "/")):
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = "".join(folder for _, folder in folders) + name
        if name.endswith("/"):
            folders.append((indent, name))
        else:
            listed.add(path)
    actual = {
        str(f.relative_to(REPO))
        for package in (*PACKAGES, "infonce_search")
        for f in (REPO / package).rglob("*.py")
        if f.name != "__init__.py"
    }
    assert sorted(actual - listed) == [], "modules missing from docs/architecture.md"
    assert sorted(listed - actual) == [], "docs/architecture.md lists modules that do not exist"
