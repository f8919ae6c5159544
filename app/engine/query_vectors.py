"""Vectors sent in a request (POST /search `vector(s)`) made into index-space queries, or refused."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.errors import DimensionMismatchError, InvalidInputError
from contract.encoding.encoder import Encoder

# largest accepted AnInfoNCE query norm after sqrt(Lambda) scaling: its squared distance to any document
# stays far below float32's 3.4e38, so scores are finite
MAX_QUERY_NORM = 1e15


def to_index_space(
    encoder: Encoder, dim: int, vectors: Sequence[Sequence[float]], field_name: str
) -> np.ndarray:
    """Raw request vectors -> index-space queries (n, dim) for `encoder`'s similarity; InvalidInputError
    naming `field_name` for a wrong dimension, NaN or inf, a zero vector (cosine) or a norm too large."""
    bad = [i for i, v in enumerate(vectors) if len(v) != dim]
    if bad:
        where = field_name if field_name == "vector" else f"{field_name}[{bad[0]}]"
        # 409: a well-formed vector that does not fit the live model (a hot swap can change the dimension)
        raise DimensionMismatchError(
            f"body.{where}: has {len(vectors[bad[0]])} numbers, the live model's dimension is {dim}"
        )
    wide = np.asarray(vectors, dtype=np.float64)  # (n, dim); float64 so huge norms do not overflow
    if not np.isfinite(wide).all():
        raise InvalidInputError(f"body.{field_name}: contains NaN or infinite values")
    if encoder.similarity.identity_index_space:
        # scores are cosines only for unit queries (the documents are unit rows): normalise, so a
        # vector of 1e38s scores like its direction instead of 6e37 (or inf, then null, at 3e38).
        # Divide by the largest entry first: squaring 1e300 would overflow even float64.
        peak = np.abs(wide).max(axis=1, keepdims=True)  # (n, 1)
        if not (peak > 0).all():
            raise InvalidInputError(f"body.{field_name}: a zero vector has no direction to search")
        unit = wide / peak
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        return encoder.to_index_space(unit.astype(np.float32))
    out = encoder.to_index_space(wide.astype(np.float32))  # (n, dim)
    # -1/2 ||q - d||^2 must stay finite in float32 (max 3.4e38) for every document d
    if not (
        np.isfinite(out).all() and (np.linalg.norm(out.astype(np.float64), axis=1) < MAX_QUERY_NORM).all()
    ):
        raise InvalidInputError(
            f"body.{field_name}: the vector's norm is too large (at most {MAX_QUERY_NORM:g})"
        )
    return out
