"""The query-side retrain's two inputs: a trainable query tower, and fixed document vectors read back
from the live index (never encoded again).

Query towers, all starting from the live bundle's own query encoder (so step 0 serves exactly what is live):
- `lora`: LoRA adapters (Hu et al. 2021, arXiv 2106.09685, through the `peft` library) on every linear layer
  of the transformer; ~1–3 % of the parameters train, and the adapters are merged into the weights when
  saved, so the saved tower is a plain sentence-transformers folder (ONNX export, the API's torch path).
  Index-preserving query adaptation (arXiv 2601.04646) reports LoRA at rank 32–64 matching or closely
  approaching full bi-encoder tuning on SciFact and FiQA-2018 without re-indexing.
- `full`: every weight of the query encoder trains.
- `truncated`: its first `query_layers` layers, every weight (training.distill.students.truncated_student).

Document vectors: every FAISS kind the project builds stores the exact vectors (Flat, HNSW32,Flat,
IVF…,Flat and IVF-PQ with its RFlat re-rank), so `reconstruct` gives the rows the index searches; an IVF
index needs its direct map first.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contract.errors import ConfigError
from contract.query_config import QueryRetrainConfig

logger = logging.getLogger(__name__)

# the linear layers of a BERT-style encoder (all-MiniLM-L6-v2): attention projections and the MLP
LORA_TARGETS = ["query", "key", "value", "dense"]


@dataclass
class QueryTower:
    """A SentenceTransformer whose query path trains, the parameters that train, and its LoRA wrapper."""

    model: Any
    params: list[torch.nn.Parameter]
    lora: Any = None  # the peft PeftModel around the transformer (its layers are replaced in place)


def query_tower(model_dir: Path, config: QueryRetrainConfig, *, seed: int | None = None) -> QueryTower:
    """The trainable query tower of `config.query_tower`, starting from the model in `model_dir`.

    `seed`: torch's seed before the LoRA adapters are drawn, so one seed gives one tower; unseeded, their
    initial values follow whatever the process drew before (a job's worker: its earlier jobs).
    """
    from sentence_transformers import SentenceTransformer

    if seed is not None:
        torch.manual_seed(seed)

    if config.query_tower == "truncated":
        from training.distill.students import truncated_student

        st = truncated_student(model_dir, config.query_layers)
    else:
        st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    lora = None
    if config.query_tower == "lora":
        from peft import LoraConfig, get_peft_model

        adapters = LoraConfig(
            r=config.query_lora_rank,
            lora_alpha=config.query_lora_alpha,
            target_modules=LORA_TARGETS,
            lora_dropout=0.0,
            bias="none",
        )
        # peft swaps the transformer's linear layers for LoRA layers in place: the sentence-transformers
        # module keeps its own reference, so its forward (and nothing else) changes
        lora = get_peft_model(st[0].auto_model, adapters)
    params = [p for p in st.parameters() if p.requires_grad]
    total = sum(p.numel() for p in st.parameters())
    trained = sum(p.numel() for p in params)
    logger.info(
        "query tower %s: %d of %d parameters train (%.1f %%)",
        config.query_tower,
        trained,
        total,
        100 * trained / max(total, 1),
    )
    return QueryTower(st, params, lora)


def merged(tower: QueryTower) -> Any:
    """The tower as a plain sentence-transformers model: LoRA adapters merged into the weights (in place)."""
    if tower.lora is not None:
        tower.lora.merge_and_unload()
        tower.lora = None
    return tower.model


def fixed_vectors(index: Any, positions: Sequence[int]) -> np.ndarray:
    """The index's stored rows (len(positions), D) for corpus `positions`: the document vectors it searches.

    `index` is a contract VectorIndex (FAISS). ConfigError when the index cannot give its vectors back
    (a Milvus collection, or a FAISS kind without stored vectors)."""
    import faiss

    raw = getattr(index, "index", None)
    if raw is None or not isinstance(raw, faiss.Index):
        raise ConfigError(
            "a query-side retrain needs a FAISS index in the bundle (Milvus is not supported yet)"
        )
    ids = np.asarray(list(positions), dtype=np.int64)
    if len(ids) == 0:
        return np.zeros((0, raw.d), dtype=np.float32)
    try:
        ivf = faiss.extract_index_ivf(raw)
    except RuntimeError:
        ivf = None
    if ivf is not None and ivf.direct_map.type == faiss.DirectMap.NoMap:
        ivf.make_direct_map()
    try:
        out = raw.reconstruct_batch(ids)  # (n, D)
    except RuntimeError as exc:
        raise ConfigError(
            f"the live index ({index.info.factory}) cannot give its vectors back: {exc}"
        ) from exc
    return np.ascontiguousarray(out, dtype=np.float32)
