"""A guard that makes any document encode fail: `python -m tests.doc_encode_guard <training CLI args>` runs the
training CLI (e.g. `worker`) with it installed.

It proves a query-side retrain never runs a document encoder (tests/test_query_retrain_job.py): every corpus
encode of the project goes through `Encoder.encode(kind="document")` (training/eval/evaluate.py,
training/export/shards.py, training/bundle/build.py, training/publish/mutation_fold.py, the gap report's
pool), and a two-tower model's document tower is reached only through it. The guard replaces that path
with an error, and also the forward pass of every document tower that is loaded, so a caller that went
around `encode` would fail too. tests/training/distill/test_query_retrain.py checks that the guard does catch a
full index build (a guard that never fires would prove nothing).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MESSAGE = "document encoder called while the document-encode guard is installed"


class DocumentEncodeCalled(RuntimeError):
    pass


def install(marker: Path | None = None) -> Callable[[], None]:
    """Patch the Encoder class of this process; write `marker` (the guard is known to be active). Returns
    the function that takes the guard off again (in-process tests)."""
    from contract.encoding import encoder as enc

    original_encode = enc.Encoder.encode
    original_load = enc.Encoder.load.__func__  # type: ignore[attr-defined]

    def encode(self: Any, texts: Any, *, kind: str = "document", **kwargs: Any) -> Any:
        if kind == "document" and len(texts):
            raise DocumentEncodeCalled(f"{MESSAGE} ({len(texts)} texts)")
        return original_encode(self, texts, kind=kind, **kwargs)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise DocumentEncodeCalled(f"{MESSAGE} (a document tower's forward)")

    def load(cls: Any, *args: Any, **kwargs: Any) -> Any:
        loaded = original_load(cls, *args, **kwargs)
        if loaded.document_model is not None:
            loaded.document_model.forward = refuse
        return loaded

    enc.Encoder.encode = encode  # type: ignore[method-assign]
    enc.Encoder.load = classmethod(load)  # type: ignore[method-assign, assignment]
    if marker is not None:
        marker.write_text(str(os.getpid()))

    def uninstall() -> None:
        enc.Encoder.encode = original_encode  # type: ignore[method-assign]
        enc.Encoder.load = classmethod(original_load)  # type: ignore[method-assign, assignment]

    return uninstall


if __name__ == "__main__":
    install(Path(os.environ["DOC_ENCODE_GUARD_MARKER"]) if "DOC_ENCODE_GUARD_MARKER" in os.environ else None)
    from training.cli.main import main

    sys.argv[0] = "training"
    main()
