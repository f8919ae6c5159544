"""One loaded copy per distinct model in this process: bundles whose encoder files are byte-identical
(the same checksums in their manifests) share the loaded weights.

Many collections are built from the same encoder: the packaged base model indexed without fine-tuning,
or a reindex of the same fine-tuned model. Loading all-MiniLM-L6-v2 costs ~90 MB and ~1 s each time;
sharing it makes the memory of N such collections that of their indexes plus one model
(bench/serving/collections_bench.py prints the table). Each bundle still gets its own `Encoder` (its own `source`
folder, which readiness checks); only the torch module underneath, or a query encoder object, is shared.
Serving never changes a model (inference only, on one inference thread), so sharing is safe.

The cache holds weak references: when the last bundle using a model is dropped (evicted, swapped out),
the model goes with it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from contract.encoding.encoder import DOCUMENT_DIR, Encoder, similarity_on_disk

T = TypeVar("T")
# files that do not change what a model computes: the model card, and exports loaded by other backends
NOT_WEIGHTS = ("README.md",)

_objects: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_lock = threading.Lock()  # loads of shared objects run one at a time, so one key is never loaded twice


def files_key(files: Mapping[str, str], prefix: str, *, skip: tuple[str, ...] = ()) -> str | None:
    """sha256 over the manifest checksums of the files under `prefix` (the model card and the `skip`
    sub-folders left out); None when the manifest lists none (nothing to compare, so nothing shared)."""
    chosen = sorted(
        (rel, digest)
        for rel, digest in files.items()
        if rel.startswith(prefix)
        and Path(rel).name not in NOT_WEIGHTS
        and not any(rel.startswith(prefix + s + "/") for s in skip)
    )
    if not chosen:
        return None
    return hashlib.sha256(json.dumps(chosen).encode()).hexdigest()


def shared(key: str | None, load: Callable[[], T]) -> T:
    """The live object loaded under `key`, or `load()` (remembered under `key` while anything holds it)."""
    if key is None:
        return load()
    with _lock:
        found = _objects.get(key)
        if found is not None:
            return found
        obj = load()
        _objects[key] = obj
        return obj


def load_encoder(folder: Path, key: str | None) -> Encoder:
    """The encoder of a bundle's model folder; the torch modules are shared with every loaded bundle whose
    model files have the same checksums (`key`, from files_key, covers a two-tower folder's document tower
    too), the Encoder around them is this folder's. A two-tower model (a query-side retrain) keeps its
    document tower: new documents must be encoded as the index was built."""
    loaded: list[Encoder] = []

    def whole() -> Encoder:  # loaded once, whichever tower is asked for first
        if not loaded:
            loaded.append(Encoder.load(folder))
        return loaded[0]

    model = shared(None if key is None else f"encoder:{key}", lambda: whole().model)
    document_model = None
    if (folder / DOCUMENT_DIR).is_dir():
        document_model = shared(
            None if key is None else f"document-encoder:{key}", lambda: whole().document_model
        )
    return Encoder(model, similarity_on_disk(folder), source=str(folder), document_model=document_model)


def loaded_keys() -> list[str]:
    """Keys of the shared objects alive now (for tests and the collections' memory accounting)."""
    with _lock:
        return list(_objects.keys())
