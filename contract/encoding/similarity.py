"""The similarity a model was trained with: the one owner of scoring, index space and temperature.

Contract module: saved as `similarity.json` beside the model, recorded in the bundle manifest, and read
by the trainer's log, the generalization-gap report and `GET /generalization-gap`, which all report
`effective_temperature()`, so one model has one temperature everywhere. Everything that asks "which
similarity?" asks it here: how two sets of unit embeddings score (`scores`), which vectors the index stores
(`to_index_space`) under which index metric (`index_metric`), how an index's raw answers become scores
(`index_scores`), and what τ is, by default (`DEFAULT_TEMPERATURE`) and per model.

Two kinds:

- `infonce` (stored as metric "cosine"): score = cosine similarity, logits s/τ, τ fixed or learned
  (CLIP-style log(1/τ), training.losses.info_nce). Index: inner product on the unit rows themselves.
- `aninfonce` (Rusak et al. 2024/25, arXiv 2407.00143): score = −½ (u−v)ᵀ diag(Λ) (u−v) with a learned
  diagonal Λ; that score already is the logit, there is no separate τ. Index: squared L2 on √Λ ⊙ u,
  because −½ (u−v)ᵀ diag(Λ) (u−v) = −½ ‖√Λ⊙u − √Λ⊙v‖².
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from contract.config import DEFAULT_TEMPERATURE
from contract.errors import ModelLoadError

Metric = Literal["cosine", "aninfonce"]  # the similarity metric, as similarity.json and manifests spell it
SimilarityMetric = Metric
IndexMetric = Literal["ip", "l2"]  # the FAISS / Milvus metric of the index-space vectors
SIMILARITY_FILE = "similarity.json"

__all__ = [
    "DEFAULT_TEMPERATURE",
    "SIMILARITY_FILE",
    "IndexMetric",
    "Metric",
    "Similarity",
    "SimilarityMetric",
    "index_scores",
    "temperature_or_default",
]


def index_scores(raw: np.ndarray, index_metric: str) -> np.ndarray:
    """What an index answers, as the model's similarity: inner products ("ip") as they are; squared L2
    distances ("l2", between √Λ-scaled vectors) as AnInfoNCE's −½ · distance. Keeps the dtype and the order
    of the best-first rows (the map is monotone)."""
    return -0.5 * raw if index_metric == "l2" else raw


def temperature_or_default(tau: float | None) -> float:
    """τ, or DEFAULT_TEMPERATURE where none was recorded (similarity.json written without one, AnInfoNCE's
    None)."""
    return tau or DEFAULT_TEMPERATURE


class Similarity(BaseModel):
    """The learned (or fixed) similarity of a model; `to_json` / `from_json` are similarity.json."""

    model_config = ConfigDict(extra="forbid")
    DEFAULT_TEMPERATURE: ClassVar[float] = DEFAULT_TEMPERATURE

    metric: Metric = Field("cosine", description="cosine: InfoNCE; aninfonce: AnInfoNCE's learned Λ")
    temperature: float | None = Field(
        DEFAULT_TEMPERATURE, description="InfoNCE τ (its final value when learned); None for AnInfoNCE"
    )
    learned: bool = Field(
        False, description="τ (InfoNCE) or Λ (AnInfoNCE, always) was learned during training"
    )
    lam: list[float] | None = Field(
        None, description="AnInfoNCE diagonal Λ, one entry per embedding dimension"
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="unknown keys of similarity.json")

    @property
    def kind(self) -> Literal["infonce", "aninfonce"]:
        return "aninfonce" if self.metric == "aninfonce" else "infonce"

    # -- scoring -------------------------------------------------------------------------------------
    @property
    def index_metric(self) -> IndexMetric:
        """The FAISS / Milvus metric that reproduces this similarity on `to_index_space` vectors."""
        return "l2" if self.metric == "aninfonce" else "ip"

    @property
    def identity_index_space(self) -> bool:
        """`to_index_space` returns the unit embeddings unchanged (cosine): the index holds the embeddings."""
        return self.metric != "aninfonce"

    def to_index_space(self, emb: np.ndarray) -> np.ndarray:
        """Normalised embeddings (n, dim) -> the vectors the index stores and searches with (float32)."""
        emb = np.ascontiguousarray(emb, dtype=np.float32)  # (n, dim)
        if self.identity_index_space:
            return emb
        assert self.lam is not None  # from_json and the Encoder refuse an AnInfoNCE model without Λ
        scale = np.sqrt(np.asarray(self.lam, dtype=np.float32))  # (dim,)
        return np.ascontiguousarray(emb * scale[None, :])

    def scores(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The learned similarity between normalised rows of a (n, d) and b (m, d): (n, m).

        Cosine: a·bᵀ. AnInfoNCE: −½ ‖√Λ⊙a − √Λ⊙b‖², by the expansion (one matmul)."""
        if self.identity_index_space:
            return a @ b.T  # (n, m)
        ya, yb = self.to_index_space(a), self.to_index_space(b)
        sq = (ya**2).sum(1)[:, None] + (yb**2).sum(1)[None, :] - 2.0 * ya @ yb.T  # (n, m)
        return index_scores(sq, "l2")

    def index_scores(self, raw: np.ndarray) -> np.ndarray:
        """An index's raw answers (inner products or squared distances) as this similarity's scores."""
        return index_scores(raw, self.index_metric)

    # -- temperature ---------------------------------------------------------------------------------
    def effective_temperature(self) -> float | None:
        """The model's temperature τ_eff: the one number every log, report and response calls temperature.

        The logits an anchor gives its candidates differ by at most 2/τ_eff, so one anchor's InfoNCE loss
        spans at most 4/τ_eff, the range every bound of the InfoNCE risk is stated in (Whiteley 2026,
        arXiv 2607.09405: Lemma 5, Prop. 1, the 2/τ cap on I_NCE).
        - InfoNCE: τ itself (its final value when learned). None when no τ was recorded.
        - AnInfoNCE (arXiv 2407.00143): 1/max Λ. Its logit −½ (u−v)ᵀΛ(u−v) lies in [−2·max Λ, 0] on the
          unit sphere, as s/τ spans 2/τ; for Λ = λ·I the loss is exactly InfoNCE at τ = 1/λ
          (−½λ‖u−v‖² = λ⟨u,v⟩ − λ, the constant cancels in the softmax).
        """
        if self.metric == "aninfonce":
            if not self.lam:
                return None
            return 1.0 / max(self.lam)
        return self.temperature

    def logit_temperature(self) -> float | None:
        """What the risks divide the score by to get a logit: τ for InfoNCE, 1 for AnInfoNCE (its score
        already is the logit). Not a temperature of the model; see `effective_temperature`."""
        return 1.0 if self.metric == "aninfonce" else self.temperature

    def logit_divisor(self) -> float:
        """`logit_temperature`, with DEFAULT_TEMPERATURE for a cosine model that recorded no τ: what a
        risk computed for this model (served risks, distillation) divides its scores by."""
        return temperature_or_default(self.logit_temperature())

    def lambda_summary(self) -> dict[str, float] | None:
        """Λ's min / mean / max (AnInfoNCE), None otherwise."""
        if not self.lam:
            return None
        return {"min": min(self.lam), "mean": sum(self.lam) / len(self.lam), "max": max(self.lam)}

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "temperature": self.temperature,
            "learned": self.learned,
            "lambda": self.lam,
            **self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Similarity:
        data = dict(data)
        metric = data.pop("metric", "cosine")
        if metric not in ("cosine", "aninfonce"):
            raise ModelLoadError(
                f"{SIMILARITY_FILE}: unknown metric {metric!r} (expected cosine or aninfonce)"
            )
        lam = data.pop("lambda", None)
        temperature = data.pop("temperature", None)
        # files written before `learned` existed: Λ is always learned, a τ was learned only if it said so
        learned = bool(data.pop("learned", metric == "aninfonce"))
        if metric == "aninfonce" and not lam:
            raise ModelLoadError(f"{SIMILARITY_FILE}: metric 'aninfonce' needs a 'lambda' vector")
        return cls(metric=metric, temperature=temperature, learned=learned, lam=lam, extra=data)
