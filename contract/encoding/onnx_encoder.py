"""The onnxruntime query encoder: serves a model folder's `onnx/` export (training.export.onnx_export writes it).

Why not sentence-transformers' `backend="onnx"`: with sentence-transformers 6 its `[onnx]` extra
(optimum-onnx 0.1.0) pins transformers<4.58 and does not install. So the
model is exported with `torch.onnx.export` and served with plain onnxruntime + the model's own
`tokenizer.json`. The exported graph contains the whole sentence-transformers pipeline of
all-MiniLM-L6-v2 (modules.json: Transformer → Pooling(mean) → Normalize), so its output is the same
L2-normalised vector `Encoder.encode` returns (cosine ≈ 1.0 for fp32, checked in the tests).

int8 is dynamic quantization of the MatMul weights, per channel (the per-tensor default loses far
more: cosine to fp32 0.89-0.97 instead of ≥ 0.98 on short queries). int8 is not a drop-in swap
(top-10 agreement 0.85-0.90, bench/index/corpus_encode_bench.py), which is why training.export.onnx_export's
`measure_onnx_quality` scores it on the
task metric (nDCG@10) against torch, and the API's `auto` considers it only when that loss is within
its budget (and then serves whichever candidate it times fastest).

Contract module for the API: imports only numpy, onnxruntime and tokenizers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from contract.encoding.length_runs import length_runs
from contract.encoding.spare_cores import SpareCores
from contract.errors import ModelLoadError

logger = logging.getLogger(__name__)

Variant = Literal["fp32", "int8"]
ONNX_SUBDIR = "onnx"  # inside a model folder, so the folder alone carries everything serving needs
FILES: dict[str, str] = {"fp32": "model.onnx", "int8": "model_int8.onnx"}
INFO_FILE = "onnx_info.json"
EXTRAS_KEY = "onnx"  # key in the bundle manifest's `extras`
OPSET = 17
# Spinning stays on while a run is in flight (onnxruntime's default), deliberately: it halves one short
# query's latency (int8, 15 tokens: 1.56 ms spinning vs 2.95 ms not; end to end /search p50 2.7 vs 5.2 ms).
# But the pool stops spinning as soon as the last run returns: left spinning between runs it burned most of a
# core that the event loop, FAISS and BM25 wanted, so one process served less, slower, at more CPU (demo
# bundle, int8, one process; python -m bench thread_cpu --spin always|default|off, alternated, 2 cores;
# bench/results/thread_cpu_spin_demo.txt: at 32 clients 319-410 req/s always, 449-491 stopping between
# runs, 373 off; 1.92-1.97 cores against 1.65-1.72). Only a session with more than one intra-op thread has
# a pool to spin: under `python -m app.serve`'s plan on 2 cores (2 workers x 1 thread) that is the
# spare-core session alone, which runs only while the other core is idle (contract/encoding/spare_cores.py).
# Module constants so that bench/harness/no_spin.py can serve the other policies (A/B runs, not settings).
ALLOW_SPINNING = "1"
STOP_SPINNING_BETWEEN_RUNS = "1"
# A batch holds at most this many tokens (rows × its longest text) besides its rows: 64 documents of 256
# tokens at once held every layer's attention for all of them. On the demo corpus's 1,100 documents
# (2 cores, python -m bench onnx_batch_tokens; bench/results/onnx_batch_tokens.txt) 2,048 cut the encode's
# peak from 1,339 to 511 MB (fp32) and 1,356 to 367 MB (int8) at 0.91x and 0.88x the time; short
# queries (up to 32 tokens) still go 64 to a batch.
BATCH_TOKENS = 2048
# Batches of changing widths grow onnxruntime's CPU arena, and it keeps what it took. On the demo documents
# (fp32, python -m bench onnx_batch_tokens shrink=off,on; bench/results/onnx_batch_tokens.txt) shrinking the
# arena after each run cut an uncapped encode's peak from 1,985 to 1,339 MB; under BATCH_TOKENS it saves
# little (489 vs 475 MB) at no measurable cost, and stays as the guard for batches of long texts. Serving's
# encodes keep the arena as it is: only a call of more than BULK_TEXTS texts shrinks it. A serving
# micro-batch holds at most 64 queries (Settings.microbatch_max_size's default); the corpus encode's chunks
# and the corpus-encoder race's probe (training/export/corpus_encoder.py's PROBE_DOCS, 256) are over it,
# so the race times the path the encode then runs.
_SHRINK_ARENA = ("memory.enable_memory_arena_shrinkage", "cpu:0")
BULK_TEXTS = 64


class OnnxQueryEncoder:
    """Encodes texts with onnxruntime; same normalised vectors as `Encoder.encode` (fp32)."""

    def __init__(
        self, session: Any, tokenizer: Any, *, variant: Variant, source: str, dim: int, max_length: int = 256
    ):
        self.session = session
        self.tokenizer = tokenizer
        self.max_length = max_length  # the export's max_seq_length: longer inputs are cut to it
        self.variant = variant
        self.source = source
        self.dim = dim
        # a wider session for runs while other cores are idle (`spare_cores`); None: this one only
        self.wide: tuple[Any, int, SpareCores] | None = None
        self.calls = self.wide_calls = 0  # encode calls, and those run on `wide` (GET /bundles shows them)

    @classmethod
    def load(cls, model_dir: str | Path, *, variant: Variant = "fp32", threads: int = 0) -> OnnxQueryEncoder:
        """Load `<model_dir>/onnx/<file>` and `<model_dir>/tokenizer.json`; ModelLoadError if absent."""
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        path = model_dir / ONNX_SUBDIR / FILES[variant]
        tok_file = model_dir / "tokenizer.json"
        for needed in (path, tok_file):
            if not needed.exists():
                raise ModelLoadError(f"ONNX {variant} encoder needs {needed}, which does not exist")
        info_file = model_dir / ONNX_SUBDIR / INFO_FILE
        info = json.loads(info_file.read_text()) if info_file.exists() else {}
        tokenizer = Tokenizer.from_file(str(tok_file))
        max_length = int(info.get("max_seq_length", 256))
        tokenizer.enable_truncation(max_length)
        tokenizer.enable_padding()
        try:
            session = _session(path, threads)
        except Exception as exc:
            raise ModelLoadError(f"cannot load ONNX model {path}: {exc}") from exc
        out_dim = session.get_outputs()[0].shape[-1]
        dim = out_dim if isinstance(out_dim, int) else int(info.get("dim", 0))
        return cls(session, tokenizer, variant=variant, source=str(path), dim=dim, max_length=max_length)

    def spare_cores(self, threads: int, probe: SpareCores) -> None:
        """Also load the model on `threads` intra-op threads, and run a batch on that session whenever
        `probe` says other processes leave that many cores idle (contract/encoding/spare_cores.py: p50
        0.86x at 1 client on 2 cores). Costs a session's memory once more: about 115 MB for int8
        all-MiniLM-L6-v2, whose 47 MB fp32 word-embedding table is most of its 59 MB file."""
        if self.wide is None and threads > 1:
            self.wide = (_session(Path(self.source), threads), threads, probe)

    def _pick(self) -> Any:
        self.calls += 1  # one thread calls it (the micro-batcher's): plain counts
        if self.wide is not None:
            session, threads, probe = self.wide
            if probe.spare(threads):
                self.wide_calls += 1
                return session
        return self.session

    def encode(self, texts: Sequence[str], *, kind: str = "query", batch_size: int = 64) -> np.ndarray:
        """float32 (n, dim), L2-normalised rows, in the order of `texts` (tokenised here)."""
        del kind
        enc = self.tokenizer.encode_batch(list(texts))  # padded: the mask says which ids are the text's
        ids = [[t for t, m in zip(e.ids, e.attention_mask, strict=True) if m] for e in enc]
        return self.encode_ids(texts, ids, batch_size)

    def encode_ids(
        self, texts: Sequence[str], token_ids: Sequence[Sequence[int]], batch_size: int = 64
    ) -> np.ndarray:
        """float32 (n, dim), L2-normalised rows of texts already tokenised by this tokenizer (special
        tokens included; cut here at the export's max length as its truncation would).

        Texts are sorted by length before batching (as sentence-transformers does), and the sorted rows
        are cut into runs where padding them to one width would cost more than another run
        (contract/encoding/length_runs.py), each run at most `batch_size` rows and BATCH_TOKENS tokens.
        """
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(token_ids[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        run_options = _shrinking() if len(texts) > BULK_TEXTS else None  # a bulk encode: see _SHRINK_ARENA
        session = self._pick()  # one choice for the whole call
        lengths = [min(len(token_ids[i]), self.max_length) for i in order]
        for start, end in length_runs(lengths, max_rows=batch_size, max_tokens=BATCH_TOKENS):
            rows = order[start:end]
            cut = [_truncated(token_ids[i], self.max_length) for i in rows]
            width = max(len(ids) for ids in cut)  # padded to this batch's longest
            ids = np.zeros((len(rows), width), dtype=np.int64)  # (b, T); [PAD] is id 0 (enable_padding's)
            mask = np.zeros((len(rows), width), dtype=np.int64)  # (b, T)
            for j, row in enumerate(cut):
                ids[j, : len(row)] = row
                mask[j, : len(row)] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            out[rows] = session.run(None, feed, run_options)[0]  # (b, dim)
        return out


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", ALLOW_SPINNING)
    options.add_session_config_entry("session.force_spinning_stop", STOP_SPINNING_BETWEEN_RUNS)
    # the model's bytes, not its path: nothing of a live bundle's file stays mapped, so damage to it while
    # serving can never fault the process (issue 43; app/live/hot_swap.py's _open)
    return ort.InferenceSession(path.read_bytes(), options, providers=["CPUExecutionProvider"])


def _shrinking() -> Any:
    """Run options that hand the arena's unused memory back after each run (onnxruntime's RunOptions)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry(*_SHRINK_ARENA)
    return options


def _truncated(ids: Sequence[int], max_length: int) -> list[int]:
    """The head of a tokenised text and its closing special token, as the tokenizer's truncation cuts."""
    return list(ids) if len(ids) <= max_length else [*ids[: max_length - 1], ids[-1]]


def embedding_dim(model: Any) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())
