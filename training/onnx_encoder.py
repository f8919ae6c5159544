"""ONNX export of the query encoder, optional int8 quantization, and an onnxruntime query encoder.

Why not sentence-transformers' `backend="onnx"`: with sentence-transformers 6 its `[onnx]` extra
(optimum-onnx 0.1.0) pins transformers<4.58 and does not install (docs/performance.md, B2). So the
model is exported with `torch.onnx.export` and served with plain onnxruntime + the model's own
`tokenizer.json`. The exported graph contains the whole sentence-transformers pipeline of
all-MiniLM-L6-v2 (modules.json: Transformer → Pooling(mean) → Normalize), so its output is the same
L2-normalised vector `Encoder.encode` returns (cosine ≈ 1.0 for fp32, checked in the tests).

int8 is dynamic quantization of the MatMul weights, per channel (the per-tensor default loses far
more: cosine to fp32 0.89-0.97 instead of ≥ 0.98 on short queries). int8 is not a drop-in swap
(performance.md: top-10 agreement 0.85-0.90), which is why `measure_onnx_quality` scores it on the
task metric (nDCG@10) against torch, and the API's `auto` considers it only when that loss is within
its budget (and then serves whichever candidate it times fastest).

Contract module for the API: imports only numpy, onnxruntime and tokenizers at module level;
torch / sentence-transformers are imported inside `export_onnx` only.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from training.errors import ModelLoadError

if TYPE_CHECKING:
    from training.encoder import Encoder

logger = logging.getLogger(__name__)

Variant = Literal["fp32", "int8"]
ONNX_SUBDIR = "onnx"  # inside a model folder, so the folder alone carries everything serving needs
FILES: dict[str, str] = {"fp32": "model.onnx", "int8": "model_int8.onnx"}
INFO_FILE = "onnx_info.json"
EXTRAS_KEY = "onnx"  # key in the bundle manifest's `extras`
OPSET = 17


@dataclass
class OnnxExportInfo:
    """What `export_onnx` wrote (paths relative to `out_dir`)."""

    out_dir: str
    files: dict[str, str]
    opset: int
    max_seq_length: int
    dim: int
    seconds: float
    bytes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def export_onnx(
    model_dir: str | Path, out_dir: str | Path | None = None, *, quantize: bool = True
) -> OnnxExportInfo:
    """Export a sentence-transformers folder (mean pooling + normalise) to ONNX; int8 too if asked.

    `out_dir` defaults to `<model_dir>/onnx`. Files are written to temporaries and renamed into place.
    """
    import torch
    from sentence_transformers import SentenceTransformer

    model_dir = Path(model_dir)
    out = Path(out_dir) if out_dir is not None else model_dir / ONNX_SUBDIR
    _check_pipeline(model_dir)
    started = time.perf_counter()
    try:
        st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    except Exception as exc:  # library errors vary; name the folder
        raise ModelLoadError(f"cannot load model from {model_dir} for ONNX export: {exc}") from exc
    out.mkdir(parents=True, exist_ok=True)
    transformer = st[0].auto_model
    if not isinstance(transformer, torch.nn.Module):
        raise ModelLoadError(f"{model_dir}: first module has no transformer to export (auto_model)")
    if st.max_seq_length is None:
        raise ModelLoadError(f"{model_dir}: max_seq_length is not set; ONNX export needs it")
    max_seq_length = int(st.max_seq_length)
    graph = _pooled_encoder(transformer.eval())
    sample = st.tokenizer(
        ["an example query", "a second, longer example query"], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    fp32 = out / FILES["fp32"]
    tmp = out / f".{FILES['fp32']}.tmp"
    with torch.no_grad():
        # dynamo=False: the TorchScript exporter handles BERT's dynamic shapes without onnxscript
        torch.onnx.export(
            graph,
            tuple(sample[n] for n in names),
            str(tmp),
            input_names=names,
            output_names=["sentence_embedding"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    os.replace(tmp, fp32)
    files = {"fp32": FILES["fp32"]}
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp8 = out / f".{FILES['int8']}.tmp"
        quantize_dynamic(
            str(fp32),
            str(tmp8),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
        )
        os.replace(tmp8, out / FILES["int8"])
        files["int8"] = FILES["int8"]
    info = OnnxExportInfo(
        out_dir=str(out),
        files=files,
        opset=OPSET,
        max_seq_length=max_seq_length,
        dim=_embedding_dim(st),
        seconds=round(time.perf_counter() - started, 3),
        bytes={k: (out / v).stat().st_size for k, v in files.items()},
    )
    _atomic_write_json(out / INFO_FILE, info.to_json())
    logger.info("exported ONNX query encoder to %s (%s) in %.1f s", out, ", ".join(files), info.seconds)
    return info


def _check_pipeline(model_dir: Path) -> None:
    """Refuse models whose pipeline is not Transformer → mean Pooling → Normalize (the graph hard-codes it)."""
    modules_file = model_dir / "modules.json"
    if not modules_file.exists():
        raise ModelLoadError(f"{model_dir}: no modules.json; not a sentence-transformers folder")
    kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in json.loads(modules_file.read_text())]
    if kinds != ["Transformer", "Pooling", "Normalize"]:
        raise ModelLoadError(
            f"{modules_file}: ONNX export supports Transformer, Pooling, Normalize; found {kinds}"
        )
    pooling = model_dir / "1_Pooling" / "config.json"
    if pooling.exists():
        conf = json.loads(pooling.read_text())
        if "pooling_mode" in conf:  # sentence-transformers >= 6 writes one mode name
            mean_only = conf["pooling_mode"] == "mean"
        else:  # older folders: one boolean per mode
            modes = [k for k, v in conf.items() if k.startswith("pooling_mode_") and v]
            mean_only = modes == ["pooling_mode_mean_tokens"]
        if not mean_only:
            raise ModelLoadError(f"{pooling}: ONNX export supports mean pooling only")


def _pooled_encoder(transformer: Any) -> Any:
    import torch

    class PooledEncoder(torch.nn.Module):
        """HF transformer + masked mean pooling + L2 normalisation, as sentence-transformers does it."""

        def __init__(self, transformer: torch.nn.Module):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state  # (B, T, D)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, D)
            return torch.nn.functional.normalize(mean, p=2, dim=1)  # (B, D)

    return PooledEncoder(transformer)


class OnnxQueryEncoder:
    """Encodes texts with onnxruntime; same normalised vectors as `Encoder.encode` (fp32)."""

    def __init__(self, session: Any, tokenizer: Any, *, variant: Variant, source: str, dim: int):
        self.session = session
        self.tokenizer = tokenizer
        self.variant = variant
        self.source = source
        self.dim = dim

    @classmethod
    def load(cls, model_dir: str | Path, *, variant: Variant = "fp32", threads: int = 0) -> OnnxQueryEncoder:
        """Load `<model_dir>/onnx/<file>` and `<model_dir>/tokenizer.json`; ModelLoadError if absent."""
        import onnxruntime as ort
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
        tokenizer.enable_truncation(int(info.get("max_seq_length", 256)))
        tokenizer.enable_padding()
        options = ort.SessionOptions()
        if threads > 0:
            options.intra_op_num_threads = threads
        # Spinning stays on (onnxruntime's default), deliberately: performance.md B7 suspected it, but
        # measured here it halves one short query's latency (int8, 15 tokens: 1.56 ms spinning vs 2.95 ms
        # not; end to end /search p50 2.7 vs 5.2 ms); at 32 clients req/s was within run-to-run noise.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelLoadError(f"cannot load ONNX model {path}: {exc}") from exc
        out_dim = session.get_outputs()[0].shape[-1]
        dim = out_dim if isinstance(out_dim, int) else int(info.get("dim", 0))
        return cls(session, tokenizer, variant=variant, source=str(path), dim=dim)

    def encode(self, texts: Sequence[str], *, kind: str = "query", batch_size: int = 64) -> np.ndarray:
        """float32 (n, dim), L2-normalised rows, in the order of `texts`.

        Texts are sorted by length before batching (as sentence-transformers does) so each batch pads
        to a length close to its own texts': scifact queries run 12-79 tokens, and a batch of 32 in
        arrival order pads to about twice the mean length, which costs more than batching saves.
        """
        del kind
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            enc = self.tokenizer.encode_batch([texts[i] for i in rows])  # padded to this batch's longest
            feed = {
                "input_ids": np.asarray([e.ids for e in enc], dtype=np.int64),  # (b, T)
                "attention_mask": np.asarray([e.attention_mask for e in enc], dtype=np.int64),  # (b, T)
                "token_type_ids": np.asarray([e.type_ids for e in enc], dtype=np.int64),  # (b, T)
            }
            out[rows] = self.session.run(None, feed)[0]  # (b, dim)
        return out


def measure_onnx_quality(
    encoder: Encoder,
    model_dir: str | Path,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    doc_embeddings: np.ndarray | None = None,
    *,
    index: Any = None,
    variants: Sequence[Variant] = ("fp32", "int8"),
) -> dict[str, Any]:
    """nDCG@10 of torch vs ONNX query encoders against the same documents; the manifest `extras["onnx"]`.

    Only the *query* side changes in serving, so documents stay as the index has them. Give either
    `doc_embeddings` (normalised rows of `encoder.encode(..., kind="document")`, row i = doc_ids[i];
    exact search) or `index` (a `training.index.VectorIndex` over `encoder.to_index_space` rows, searched
    exactly as the API does). Returns {"ndcg@10": {"torch", "fp32", "int8"}, "ndcg_loss": {...},
    "cosine_min": {...}, "files": {...}, "n_queries"}.
    """
    if (doc_embeddings is None) == (index is None):
        raise ValueError("give exactly one of doc_embeddings and index")
    qids = [q for q in queries if qrels.get(q)]
    texts = [queries[q] for q in qids]

    def ndcg(query_emb: np.ndarray) -> float:
        return _ndcg_at_10(
            encoder, query_emb, qids, doc_ids, qrels, doc_embeddings=doc_embeddings, index=index
        )

    torch_q = encoder.encode(texts, kind="query")  # (nq, D)
    result: dict[str, Any] = {
        "n_queries": len(qids),
        "files": {},
        "ndcg@10": {},
        "ndcg_loss": {},
        "cosine_min": {},
    }
    result["ndcg@10"]["torch"] = ndcg(torch_q)
    for variant in variants:
        onnx_q = OnnxQueryEncoder.load(model_dir, variant=variant).encode(texts)  # (nq, D)
        result["files"][variant] = f"{ONNX_SUBDIR}/{FILES[variant]}"
        result["ndcg@10"][variant] = ndcg(onnx_q)
        result["ndcg_loss"][variant] = round(result["ndcg@10"]["torch"] - result["ndcg@10"][variant], 6)
        result["cosine_min"][variant] = float((onnx_q * torch_q).sum(1).min()) if len(qids) else 1.0
    logger.info("ONNX quality vs torch (nDCG@10 on %d queries): %s", len(qids), result["ndcg@10"])
    return result


def _ndcg_at_10(
    encoder: Encoder,
    query_emb: np.ndarray,
    qids: Sequence[str],
    doc_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    doc_embeddings: np.ndarray | None,
    index: Any,
) -> float:
    """Mean trec_eval nDCG@10 of the top 100 by the model's learned similarity."""
    # imported here: evaluate pulls pytrec_eval and the data readers, which serving never needs
    from training.evaluate import exact_search, trec_metrics

    if not qids:
        return 0.0
    if index is not None:
        rows = index.search(encoder.to_index_space(query_emb), 100)
    else:
        if doc_embeddings is None:
            raise ValueError("nDCG@10 needs either an index or doc_embeddings")
        scores, idx = exact_search(query_emb, doc_embeddings, 100, similarity=encoder.similarity_matrix)
        rows = list(zip(idx, scores, strict=True))
    run = {q: {doc_ids[int(j)]: float(s) for j, s in zip(*rows[r], strict=True)} for r, q in enumerate(qids)}
    per_query = trec_metrics({q: dict(qrels[q]) for q in qids}, run)["ndcg@10"]
    return round(float(np.mean(list(per_query.values()))), 6)


def attach_onnx(
    bundle_dir: str | Path,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    quantize: bool = True,
    index_opener: Any = None,
) -> dict[str, Any]:
    """Export the ONNX query encoder(s) into a *staged* (not yet published) bundle and record their quality.

    Writes `<bundle>/model/onnx/`, measures nDCG@10 vs torch on `queries`/`qrels` (held-out ones) through
    the bundle's own index, stores the record in the manifest's `extras["onnx"]` and refreshes the
    manifest's checksums. Call it between `build_bundle` and `BundleStore.publish`.
    """
    from training.bundle import MANIFEST_FILE, MODEL_DIR, checksums, load_bundle, write_json_atomic

    folder = Path(bundle_dir)
    bundle = load_bundle(folder, verify=False, index_opener=index_opener)  # opener: a Milvus-backed bundle
    info = export_onnx(folder / MODEL_DIR, quantize=quantize)
    record = measure_onnx_quality(
        bundle.encoder,
        folder / MODEL_DIR,
        queries,
        qrels,
        bundle.doc_ids,
        index=bundle.index,
        variants=tuple(info.files),  # type: ignore[arg-type]
    )
    record["files"] = {k: f"{MODEL_DIR}/{ONNX_SUBDIR}/{v}" for k, v in info.files.items()}
    record["export_seconds"] = info.seconds
    record["bytes"] = info.bytes
    bundle.docstore.close()
    manifest = bundle.manifest.model_copy(deep=True)
    manifest.extras[EXTRAS_KEY] = record
    manifest.files = checksums(folder)
    write_json_atomic(folder / MANIFEST_FILE, manifest.model_dump(mode="json"))
    return record


def _embedding_dim(model: Any) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())


def _atomic_write_json(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)
