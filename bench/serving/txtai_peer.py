"""txtai's API as a peer of bench/serving/load_bench.py, in a virtualenv of its own (never a project dependency).

    .venv/bin/python -m bench txtai_peer --bundle var/bench/bundles/<version>   # install + build the index

`ensure_venv` creates var/bench/txtai-venv and installs txtai there with pip. The venv sees the project
venv's packages through a .pth file (torch, transformers, sentence-transformers and faiss are large and
already here), and txtai itself is installed without dependencies plus the few small ones it adds.
`build_index` then indexes the bundle's corpus with txtai's own Embeddings (same model folder, same
sentence-transformers vectorizer, FAISS) into var/bench/txtai-index, once. `server_command` runs
`uvicorn txtai.api:app` on it; its search is GET /search?query=...&limit=10.
"""

from __future__ import annotations

import argparse
import json
import os
import site
import subprocess
import sys
from pathlib import Path

from bench.harness.paths import CACHE

VENV = CACHE / "txtai-venv"
INDEX = CACHE / "txtai-index"
TXTAI = "txtai==9.14.0"
# txtai's small requirements plus its "api" extra; the large ones (torch, transformers, faiss, fastapi,
# uvicorn, httpx) come from the project venv through the .pth file
EXTRA_DEPS = [
    "msgpack>=1.0.7",
    "regex>=2022.8.17",
    "pyyaml>=5.3",
    "aiohttp>=3.8.1",
    "fastapi-mcp>=0.4.0",
    "python-multipart>=0.0.7",
]


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> str | None:
    """Create the venv and install txtai; None when ready, else why not (printed by the bench)."""
    py = venv_python()
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
            inner = subprocess.run(
                [str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            Path(inner, "project-venv.pth").write_text(site.getsitepackages()[0] + "\n")
        if subprocess.run([str(py), "-c", "import txtai.api"], capture_output=True).returncode != 0:
            pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, "--no-deps", TXTAI], check=True, capture_output=True, text=True)
            subprocess.run([*pip, *EXTRA_DEPS], check=True, capture_output=True, text=True)
            check = subprocess.run([str(py), "-c", "import txtai.api"], capture_output=True, text=True)
            if check.returncode != 0:
                return f"txtai installed but does not import: {check.stderr.strip().splitlines()[-1]}"
    except subprocess.CalledProcessError as exc:
        return f"txtai could not be installed: {(exc.stderr or '').strip()[-300:]}"
    return None


BUILD = """
import json, sys
from txtai import Embeddings
bundle, out = sys.argv[1], sys.argv[2]
import sqlite3
rows = sqlite3.connect(bundle + "/docs.sqlite").execute("SELECT id, title, text FROM docs ORDER BY position")
data = [(i, (t + " " + x).strip() if t else x, None) for i, t, x in rows]
emb = Embeddings({"path": bundle + "/model", "content": False, "backend": "faiss", "faiss": {"components": "IDMap,Flat"}})
emb.index(data)
emb.save(out)
print(json.dumps({"indexed": len(data)}))
"""


def build_index(bundle: Path) -> None:
    """Index the bundle's corpus with txtai (its own vectorizer and FAISS), once."""
    marker = INDEX / "built-from.json"
    if marker.exists():  # built from this bundle, or from one with the same documents in the same order
        built = Path(json.loads(marker.read_text()).get("bundle", ""), "ids.json")
        if built.exists() and built.read_bytes() == (bundle / "ids.json").read_bytes():
            return
    subprocess.run([str(venv_python()), "-c", BUILD, str(bundle), str(INDEX)], check=True)
    marker.write_text(json.dumps({"bundle": str(bundle)}))


def server_command(port: int) -> tuple[list[str], dict[str, str]]:
    config = CACHE / "txtai-api.yml"
    config.write_text(f"path: {INDEX}\nwritable: false\n")
    env = {**os.environ, "CONFIG": str(config), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [str(venv_python()), "-m", "uvicorn", "txtai.api:app", "--host", "127.0.0.1", "--port", str(port)]
    return cmd + ["--log-level", "warning", "--no-access-log"], env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    args = parser.parse_args(argv)
    problem = ensure_venv()
    if problem:
        raise SystemExit(problem)
    build_index(args.bundle.resolve())
    print(f"txtai index ready in {INDEX}")


if __name__ == "__main__":
    main()
