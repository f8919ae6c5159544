"""Import direction (docs/architecture.md): training never imports app; app imports only the contract
modules of training. Imports are read with `ast`, so nothing is executed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what the API may import from training: the contract modules (plus the ONNX query encoder, which is
# itself import-light, and the job queue for job submission)
APP_MAY_IMPORT = {
    "training.encoder",
    "training.index",
    "training.bundle",
    "training.errors",
    "training.report_schema",
    "training.onnx_encoder",
    "training.query_encoders",
    "training.jobs.queue",
    "training.mutation_log",  # the shared document mutation log (upsert / delete)
    "training.overlay",  # those mutations applied on top of a loaded bundle
}


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


def test_training_never_imports_app():
    offenders = {
        str(f.relative_to(REPO)): sorted(m for m in imports_of(f) if m == "app" or m.startswith("app."))
        for f in _files("training")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_app_imports_only_the_training_contract_modules():
    offenders = {}
    for f in _files("app"):
        # `from training import errors` yields both "training" and "training.errors": judge the longest names
        names = {m for m in imports_of(f) if m == "training" or m.startswith("training.")}
        modules = {m for m in names if not any(other.startswith(m + ".") for other in names)}
        bad = sorted(
            m for m in modules if not any(m == ok or m.startswith(ok + ".") for ok in APP_MAY_IMPORT)
        )
        if bad:
            offenders[str(f.relative_to(REPO))] = bad
    assert offenders == {}


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
