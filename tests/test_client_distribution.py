"""The client needs only httpx, pydantic and tenacity: importing it loads no server code (torch, faiss,
numpy, app, training, contract), and its own distribution (clients/python/pyproject.toml) installs into a
fresh virtual environment with nothing else and works there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER_SIDE = ("torch", "faiss", "numpy", "sentence_transformers", "app", "training", "contract")
PROBE = """
import json, sys
import infonce_search, infonce_search.client, infonce_search.models, infonce_search.retries
from infonce_search import Client, RetryPolicy, ServerUnreachable
try:
    Client("http://127.0.0.1:9", retry=RetryPolicy(attempts=2, initial=0.01)).ready()
except ServerUnreachable as exc:
    down = type(exc).__name__
print(json.dumps({"file": infonce_search.__file__, "down": down,
                  "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def probe(python: str, cwd: Path) -> dict:
    out = subprocess.run([python, "-I", "-c", PROBE], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_importing_the_client_loads_no_server_code(tmp_path):
    seen = probe(sys.executable, tmp_path)  # -I: no cwd or PYTHONPATH on sys.path, the installed package
    assert seen["down"] == "ServerUnreachable"
    assert not set(SERVER_SIDE) & set(seen["loaded"]), seen["loaded"]
    assert {"httpx", "pydantic", "tenacity"} <= set(seen["loaded"])


@pytest.mark.slow
def test_the_client_distribution_installs_alone_in_a_fresh_venv(tmp_path):
    """pip installs clients/python (from a copy, so the build leaves nothing in the tree) with its
    dependencies from the package index; the venv then holds nothing but the client and those."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "clients" / "python", src / "clients" / "python")
    shutil.copytree(
        ROOT / "infonce_search", src / "infonce_search", ignore=shutil.ignore_patterns("__pycache__")
    )
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(src / "clients" / "python")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, timeout=120
    )
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert "infonce-search-client" in names
    assert not names & {"torch", "faiss-cpu", "numpy", "sentence-transformers", "fastapi", "infonce-search"}
    seen = probe(python, tmp_path)
    assert seen["file"].startswith(str(env_dir)) and seen["down"] == "ServerUnreachable"
    assert (Path(seen["file"]).parent / "py.typed").is_file()  # typed for mypy / pyright users
    assert not set(SERVER_SIDE) & set(seen["loaded"])
