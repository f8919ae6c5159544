"""Run as a subprocess by test_streaming.py: the real `index_model` (packaged encoder, FAISS flat, no
ONNX) over a synthetic BEIR corpus of short texts, reporting the peak growth of this process's anonymous
resident memory from the first checkpoint (data and model loaded) to the published bundle.

The one fake, at the edge, for speed: documents are "encoded" as seeded random unit vectors (the issue's
synthetic vectors), since the real encoder manages ~20-500 short documents/s on the shared 2 cores and
the test needs tens of thousands to rise clear of the process's noise. Queries go through the real
encoder; everything from the encoded chunk on (shards, evaluation, fold, FAISS build, lexical step,
publish) is index_model's own code.

    python -m tests.training.index_probe <work folder> <n documents>

Prints one JSON line: {"embeddings_bytes", "growth", "n_vectors", "ntotal", "leftovers"}.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import numpy as np

from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan
from tests.training.stream_probe import PeakSampler, rss_anon
from training.train.run_hooks import RunHooks

WORDS = [
    "acid",
    "bone",
    "cell",
    "dose",
    "gene",
    "host",
    "iron",
    "lung",
    "mice",
    "nerve",
    "organ",
    "plasma",
    "renal",
    "serum",
    "skin",
    "tumor",
    "virus",
    "wound",
    "blood",
    "brain",
    "liver",
    "heart",
    "fever",
    "gut",
    "insulin",
    "kidney",
    "muscle",
    "protein",
    "receptor",
    "spleen",
]
N_QUERIES = 20


def write_corpus(folder: Path, n: int) -> Path:
    """n documents of three to five words; each query repeats one document's text, its only relevant one."""
    rng = np.random.default_rng(0)
    (folder / "qrels").mkdir(parents=True)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 6))) for _ in range(n)]
    with (folder / "corpus.jsonl").open("w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": f"{text} {i}"}) + "\n")
    relevant = rng.choice(n, size=N_QUERIES, replace=False)
    with (folder / "queries.jsonl").open("w") as f:
        for q, i in enumerate(relevant):
            f.write(json.dumps({"_id": f"q{q}", "text": texts[i]}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"q{q}\td{i}\t1" for q, i in enumerate(relevant)]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def synthetic_documents() -> None:
    """Encoder.encode for kind="document" returns unit vectors seeded by the chunk's first text."""
    from contract.encoding.encoder import Encoder

    real = Encoder.encode

    def encode(self: Encoder, texts: list[str], *, kind: str = "document", **kwargs: object) -> np.ndarray:
        if kind != "document" or not texts:
            return real(self, texts, kind=kind, **kwargs)  # type: ignore[arg-type]
        rng = np.random.default_rng(zlib.crc32(texts[0].encode()))
        x = rng.normal(size=(len(texts), self.dim)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    Encoder.encode = encode  # type: ignore[method-assign,assignment]


def main() -> None:
    from contract.bundles.bundle import load_bundle
    from training.publish.index_model import index_model

    synthetic_documents()

    work, n = Path(sys.argv[1]), int(sys.argv[2])
    data = write_corpus(work / "data", n)
    state: dict[str, object] = {}

    def checkpoint() -> None:  # the first call comes after the data and the model are loaded
        if "sampler" not in state:
            state["base"] = rss_anon()
            state["sampler"] = PeakSampler().__enter__()

    result = index_model(
        None,
        PublishPlan(
            data=DataPlan(data_dir=str(data)),
            index=IndexPlan(kind="flat"),
            publication=PublicationPlan(bundles_dir=str(work / "bundles"), onnx=False, distill=False),
        ),
        RunHooks(show_progress=False, checkpoint=checkpoint),
    )
    sampler = state["sampler"]
    assert isinstance(sampler, PeakSampler) and isinstance(state["base"], int)
    sampler.__exit__(None, None, None)
    bundle = load_bundle(work / "bundles" / result.version)
    out = {
        "embeddings_bytes": n * bundle.manifest.dim * 4,
        "growth": sampler.peak - state["base"],
        "n_vectors": bundle.manifest.n_vectors,
        "ntotal": bundle.index.ntotal,
        "leftovers": sorted(p.name for p in (work / "bundles").iterdir() if p.name.startswith(".build-")),
    }
    print(json.dumps(out))  # noqa: T201 - the parent test reads this line


if __name__ == "__main__":
    main()
