"""The five corpora the distillation recipe is chosen on and the load bench serves (one place for both).

- scifact: ../shared/data/scifact (BEIR; claims → abstracts; 5,183 documents);
- pydocs: the demo dataset, built here with training.data.demo_data (standard-library docstrings:
  summary → the rest of the docstring; 1,100 documents, 300 test queries);
- manpages: training.data.man_pages over the installed manual pages (NAME summary → DESCRIPTION;
  2,500 documents, 500 test queries);
- debpkgs: training.data.debian_packages over dpkg's status file (package synopsis → extended description;
  750 documents, 250 test queries);
- pycode: training.data.code_search over the standard library (docstring summary → the function's code
  without its docstring; 1,500 documents, 300 test queries).

Built datasets and the base model's document vectors are cached under var/bench/corpora/ (git-ignored).
The vectors go into a training.eval.embedding_cache folder under the *torch* base encoder's key, so the
pipeline's `index` (bench/serving/load_bench.py builds each corpus's bundle with it) finds them instead of encoding
the corpus again. They are computed with the base model's ONNX fp32 export (cosine 1.0000 to torch,
about 2x faster on this CPU; bench/serving/load_bench.py), as the load bench always did.
"""

from __future__ import annotations

import functools
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.paths import REPO, SCIFACT

ROOT = REPO / "var" / "bench" / "corpora"
EMBEDDINGS = ROOT / "embeddings"
BASE_ONNX = REPO / "var" / "bench" / "base-onnx"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Corpus:
    name: str
    kind: str  # what a query and a document are


CORPORA = (
    Corpus("scifact", "scientific claim → abstract"),
    Corpus("pydocs", "docstring summary → rest of the docstring"),
    Corpus("manpages", "man page NAME summary → DESCRIPTION"),
    Corpus("debpkgs", "Debian package synopsis → extended description"),
    Corpus("pycode", "function docstring summary → its code"),
)


def data_dir(corpus: Corpus) -> Path | None:
    """The corpus's BEIR folder, built once when it is one of ours; None (reason logged) when its source
    is missing on this machine."""
    if corpus.name == "scifact":
        if not (SCIFACT / "corpus.jsonl").exists():
            print(f"scifact: skipped: {SCIFACT} is missing", flush=True)
            return None
        return SCIFACT
    out = ROOT / corpus.name / "data"
    if (out / "corpus.jsonl").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _build(corpus.name, out)
    except FileNotFoundError as exc:
        print(f"{corpus.name}: skipped: {exc}", flush=True)
        return None


def _build(name: str, out: Path) -> Path:
    """Build one of our corpora into `out` (FileNotFoundError naming the source when it is missing)."""
    if name == "pydocs":
        from training.data.demo_data import build_demo_dataset

        return build_demo_dataset(out)
    if name == "manpages":
        from training.data.man_pages import build_man_dataset

        return build_man_dataset(out)
    if name == "debpkgs":
        from training.data.debian_packages import build_packages_dataset

        return build_packages_dataset(out)
    if name == "pycode":
        from training.data.code_search import build_code_dataset

        return build_code_dataset(out)
    raise ValueError(f"unknown corpus {name!r}")


@functools.lru_cache(maxsize=1)
def base_onnx() -> Any:
    """The base model's ONNX fp32 query/document encoder (exported once into var/bench/base-onnx)."""
    from contract.encoding.encoder import default_model_path
    from contract.encoding.onnx_encoder import OnnxQueryEncoder
    from training.export.onnx_export import export_onnx

    if not (BASE_ONNX / "onnx" / "model.onnx").exists():
        BASE_ONNX.mkdir(parents=True, exist_ok=True)
        export_onnx(default_model_path(), BASE_ONNX / "onnx", quantize=False)
        shutil.copy(default_model_path() / "tokenizer.json", BASE_ONNX / "tokenizer.json")
    return OnnxQueryEncoder.load(BASE_ONNX, variant="fp32")


@functools.lru_cache(maxsize=1)
def _base_encoder() -> Any:
    from contract.encoding.encoder import Encoder

    return Encoder.load()


def document_vectors(data: Any, onnx: Any) -> np.ndarray:
    """(n_docs, D) base-model vectors of `data`'s corpus in corpus order, from (or into) the cache."""
    from contract.encoding.encoder import document_text
    from training.eval.embedding_cache import EmbeddingCache

    texts = [document_text(d.title, d.text) for d in data.corpus.values()]

    def compute() -> np.ndarray:
        t0 = time.perf_counter()
        emb = np.concatenate(
            [onnx.encode(texts[i : i + 256], batch_size=32) for i in range(0, len(texts), 256)]
        )
        print(f"encoded {len(texts)} documents in {time.perf_counter() - t0:.0f} s", flush=True)
        return emb

    cache = EmbeddingCache(EMBEDDINGS)
    return np.ascontiguousarray(cache.get_or_compute(_base_encoder(), texts, compute), dtype=np.float32)


def corpus_setup(corpus: Corpus) -> dict[str, Any] | None:
    """The corpus's training split, document ids and base vectors, and the ONNX teacher (None: missing)."""
    from training.data.beir import load_beir

    folder = data_dir(corpus)
    if folder is None:
        return None
    train = load_beir(folder, "train")
    onnx = base_onnx()
    return {
        "folder": folder,
        "train": train,
        "doc_ids": list(train.corpus),
        "doc_emb": document_vectors(train, onnx),
        "onnx": onnx,
    }
