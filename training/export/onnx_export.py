"""ONNX export of the query encoder (optional int8 quantization), its quality on the task metric, and
attaching it to a staged bundle. The runtime side is contract.encoding.onnx_encoder.

Why not sentence-transformers' `backend="onnx"`: see contract.encoding.onnx_encoder's docstring. int8 is not a
drop-in swap (top-10 agreement 0.85-0.90, bench/index/corpus_encode_bench.py), which is why
`measure_onnx_quality` scores it on nDCG@10 against torch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.atomic import atomic_path, write_json_atomic
from contract.encoding.onnx_encoder import (
    EXTRAS_KEY,
    FILES,
    INFO_FILE,
    ONNX_SUBDIR,
    OPSET,
    OnnxQueryEncoder,
    Variant,
    embedding_dim,
)
from contract.errors import ModelLoadError

if TYPE_CHECKING:
    from contract.encoding.encoder import Encoder

logger = logging.getLogger(__name__)


@dataclass
class OnnxExportInfo:
    """What `export_onnx` wrote (paths relative to `out_dir`). onnx_info.json, which lives in `out_dir`,
    leaves `out_dir` out: a bundle carries no absolute path of the machine that built it."""

    out_dir: str
    files: dict[str, str]
    opset: int
    max_seq_length: int
    dim: int
    seconds: float
    bytes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "out_dir"}


def export_onnx(
    model_dir: str | Path, out_dir: str | Path | None = None, *, quantize: bool = True
) -> OnnxExportInfo:
    """Export a sentence-transformers folder (mean pooling + normalise) to ONNX; int8 too if asked.

    `out_dir` defaults to `<model_dir>/onnx`. Files are written to temporaries and renamed into place.
    """
    model_dir = Path(model_dir)
    out = Path(out_dir) if out_dir is not None else model_dir / ONNX_SUBDIR
    _check_pipeline(model_dir)
    started = time.perf_counter()
    st, transformer = _load_for_export(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    _export_fp32(st, transformer, out / FILES["fp32"])
    files = {"fp32": FILES["fp32"]}
    if quantize:
        _quantize_int8(out / FILES["fp32"], out / FILES["int8"])
        files["int8"] = FILES["int8"]
    info = OnnxExportInfo(
        out_dir=str(out),
        files=files,
        opset=OPSET,
        max_seq_length=int(st.max_seq_length),
        dim=embedding_dim(st),
        seconds=round(time.perf_counter() - started, 3),
        bytes={k: (out / v).stat().st_size for k, v in files.items()},
    )
    write_json_atomic(out / INFO_FILE, info.to_json())
    logger.info("exported ONNX query encoder to %s (%s) in %.1f s", out, ", ".join(files), info.seconds)
    return info


def _load_for_export(model_dir: Path) -> tuple[Any, Any]:
    """The sentence-transformers model (on cpu) and its transformer, or a ModelLoadError naming the folder."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    except Exception as exc:  # library errors vary; name the folder
        raise ModelLoadError(f"cannot load model from {model_dir} for ONNX export: {exc}") from exc
    transformer = st[0].auto_model
    if not isinstance(transformer, torch.nn.Module):
        raise ModelLoadError(f"{model_dir}: first module has no transformer to export (auto_model)")
    if st.max_seq_length is None:
        raise ModelLoadError(f"{model_dir}: max_seq_length is not set; ONNX export needs it")
    return st, transformer


def _export_fp32(st: Any, transformer: Any, path: Path) -> None:
    """The pooled, normalised encoder as one ONNX graph with dynamic batch and token axes."""
    import torch

    graph = _pooled_encoder(transformer.eval())
    sample = st.tokenizer(
        ["an example query", "a second, longer example query"], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    with atomic_path(path) as tmp, torch.no_grad(), _quiet_tracer():
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


def _quantize_int8(fp32: Path, path: Path) -> None:
    """Dynamic int8 quantisation of the MatMul weights, per channel."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with atomic_path(path) as tmp8, _without_root_advice():
        quantize_dynamic(
            str(fp32),
            str(tmp8),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
        )


@contextlib.contextmanager
def _quiet_tracer() -> Iterator[None]:
    """The tracer's warnings about this graph, which the export's own checks answer, kept off stderr.

    TracerWarning: transformers' attention-mask code branches on shapes (padding length, causal); for this
    encoder both branches are constant (no KV cache, never causal), and the exported graph is checked
    against torch's vectors at other batch and token sizes (tests/app/search/test_onnx.py). The aten::index note
    warns about negative indices, which the graph's gathers never receive (token ids and positions)."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=r"Exporting aten::index operator", category=UserWarning)
        yield


class _DropAdvice(logging.Filter):
    """onnxruntime's quantizer logs generic advice on the root logger (`logging.warning`), which would
    print past the root's WARNING level on every export; the int8 model's quality is measured instead
    (measure_onnx_quality: nDCG@10 against torch)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing before quantization")


@contextlib.contextmanager
def _without_root_advice() -> Iterator[None]:
    root, advice = logging.getLogger(), _DropAdvice()
    root.addFilter(advice)  # a logger's filter sees records logged on it: `logging.warning` is the root's
    try:
        yield
    finally:
        root.removeFilter(advice)


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
    exact search) or `index` (a `contract.index.vector_index.VectorIndex` over `encoder.to_index_space` rows, searched
    exactly as the API does). Returns {"ndcg@10": {"torch", "fp32", "int8"}, "ndcg_loss": {...},
    "cosine_min": {...}, "files": {...}, "n_queries"}.
    """
    if (doc_embeddings is None) == (index is None):
        raise ValueError("give exactly one of doc_embeddings and index")
    qids = [q for q in queries if qrels.get(q)]
    texts = [queries[q] for q in qids]

    # imported here: evaluate pulls pytrec_eval and the data readers, which exporting the model never needs
    from training.eval.search_metrics import search_metrics

    def ndcg(query_emb: np.ndarray) -> float:
        return search_metrics(
            encoder.similarity, query_emb, qids, qrels, doc_ids, index=index, doc_embeddings=doc_embeddings
        )["ndcg@10"]

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
    from contract.bundles.bundle import MANIFEST_FILE, MODEL_DIR, checksums, load_bundle

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
