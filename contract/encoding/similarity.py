"""The similarity a model was trained with, and the one meaning of its temperature.

Contract module: saved as `similarity.json` beside the model, recorded in the bundle manifest, and read
by the trainer's log, the generalization-gap report and `GET /generalization-gap`, which all report
`effective_temperature()`, so one model has one temperature everywhere.

Two kinds:

- `infonce` (stored as metric "cosine"): score = cosine similarity, logits s/τ, τ fixed or learned
  (CLIP-style log(1/τ), training.losses.info_nce).
- `aninfonce` (Rusak et al. 2024/25, arXiv 2407.00143): score = −½ (u−v)ᵀ diag(Λ) (u−v) with a learned
  diagonal Λ; that score already is the logit, there is no separate τ.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.errors import ModelLoadError

Metric = Literal["cosine", "aninfonce"]
SIMILARITY_FILE = "similarity.json"


class Similarity(BaseModel):
    """The learned (or fixed) similarity of a model; `to_json` / `from_json` are similarity.json."""

    model_config = ConfigDict(extra="forbid")

    metric: Metric = Field("cosine", description="cosine: InfoNCE; aninfonce: AnInfoNCE's learned Λ")
    temperature: float | None = Field(
        0.05, description="InfoNCE τ (its final value when learned); None for AnInfoNCE"
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
