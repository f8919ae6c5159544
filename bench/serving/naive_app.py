"""The naive peer of bench/serving/load_bench.py: FastAPI + sentence-transformers (torch) per request + FAISS flat.

What one writes in an afternoon: a sync endpoint (FastAPI runs it in its thread pool), the model's own
`encode` for each request, an exact inner-product index, no batching, no cache. It serves the bench
bundle's model and vectors (NAIVE_BUNDLE = a bundle folder), so only the serving stack differs.

    NAIVE_BUNDLE=var/bench/bundles/<version> uvicorn --factory bench.serving.naive_app:create_app
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi import FastAPI
from pydantic import BaseModel


class Query(BaseModel):
    query: str
    top_k: int = 10


def create_app() -> FastAPI:
    import faiss
    from sentence_transformers import SentenceTransformer

    folder = Path(os.environ["NAIVE_BUNDLE"])
    model = SentenceTransformer(str(folder / "model"), device="cpu", local_files_only=True)
    index = faiss.read_index(str(folder / "index.faiss"))
    ids = json.loads((folder / "ids.json").read_text())
    app = FastAPI()

    @app.get("/readyz")
    def ready() -> dict[str, str]:
        return {"status": "ready"}

    @app.post("/search")
    def search(q: Query) -> dict[str, list[dict[str, object]]]:
        vec = model.encode([q.query], normalize_embeddings=True)  # (1, dim)
        scores, pos = index.search(vec, q.top_k)
        return {"hits": [{"id": ids[p], "score": float(s)} for p, s in zip(pos[0], scores[0], strict=True)]}

    return app
