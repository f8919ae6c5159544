"""onnxruntime query batches: CPU per query by batch size, with the rows cut into runs by length or not.

    .venv/bin/python -m bench onnx_query_runs [n=512] [variants=int8,fp32] [batches=1,4,16,32]
        [overheads=1000000000,8] [texts=queries]   (texts=documents: the demo corpus's documents instead)

The demo corpus's queries (docstring summaries: 14 tokens at the median, a long tail) go to
`OnnxQueryEncoder.encode` in batches of each size, in their own order (a micro-batch's shape), on one
intra-op thread, and the process's CPU time per query is printed. `overheads` are values of
contract/encoding/length_runs.py's RUN_OVERHEAD_TOKENS: 1000000000 makes every batch one run (padded to
its longest row, as before length_runs), smaller values cut a batch where padding would cost more.

A second table encodes one median-length text repeated (no padding at all) at each batch size, and fits
`cost = a + b × tokens` to its first and last rows: a / b is a run's fixed cost in tokens, the value
RUN_OVERHEAD_TOKENS stands for.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from bench.harness.profiling import stat_cpu_s
from bench.harness.usage import asked_for_help

ONE_RUN = 1_000_000_000  # an overhead that makes every batch one run


def per_query_ms(encoder, texts: list[str], batch: int) -> float:
    batches = [texts[i : i + batch] for i in range(0, len(texts) - batch + 1, batch)]
    for warm in batches[:2]:
        encoder.encode(warm, batch_size=batch)
    started = stat_cpu_s("/proc/self/stat")
    for b in batches:
        encoder.encode(b, batch_size=batch)
    return (stat_cpu_s("/proc/self/stat") - started) * 1000 / sum(map(len, batches))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    args = dict(a.split("=", 1) for a in argv)
    n = int(args.get("n", 512))
    kind = args.get("texts", "queries")
    if kind not in ("queries", "documents"):
        raise SystemExit(f"texts={kind}: expected queries or documents")
    variants = args.get("variants", "int8,fp32").split(",")
    sizes = [int(b) for b in args.get("batches", "1,4,16,32").split(",")]
    overheads = [int(o) for o in args.get("overheads", "1000000000,8").split(",")]

    import numpy as np

    from contract.encoding import onnx_encoder
    from contract.encoding.encoder import default_model_path, document_text
    from training.data.beir import load_corpus, load_queries
    from training.data.demo_data import build_demo_dataset
    from training.export.onnx_export import export_onnx

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = build_demo_dataset(tmp / "pydocs")
        if kind == "documents":
            docs = load_corpus(data / "corpus.jsonl").values()
            queries = [document_text(d.title, d.text) for d in docs][:n]
        else:
            queries = [q for q in load_queries(data / "queries.jsonl").values() if q.strip()][:n]
        model_dir = tmp / "model"
        shutil.copytree(default_model_path(), model_dir)  # the packaged folder may be read-only
        export_onnx(model_dir, quantize=True)
        for variant in variants:
            encoder = onnx_encoder.OnnxQueryEncoder.load(model_dir, variant=variant, threads=1)  # type: ignore[arg-type]
            lengths = [len(encoder.tokenizer.encode(q).ids) for q in queries]  # padding off for one text
            print(
                f"\n{variant}, one thread, {len(queries)} demo {kind}: tokens median {np.median(lengths):.0f}, "
                f"p90 {np.percentile(lengths, 90):.0f}, max {max(lengths)}"
            )
            print("| batch | " + " | ".join(f"overhead {o:,} ms a text" for o in overheads) + " |")
            print("|---:|" + "---:|" * len(overheads))
            for size in sizes:
                cells = []
                for overhead in overheads:
                    cells.append(f"{per_query_ms(_Runs(encoder, overhead), queries, size):.3f}")
                print(f"| {size} | " + " | ".join(cells) + " |", flush=True)
            median = queries[int(np.argsort(lengths)[len(lengths) // 2])]
            same = [median] * (max(sizes) * 8)
            costs = {size: per_query_ms(_Runs(encoder, ONE_RUN), same, size) for size in sizes}
            tokens = float(np.median(lengths))
            first, last = min(sizes), max(sizes)
            b = (costs[last] * last - costs[first] * first) / ((last - first) * tokens)
            a = costs[first] * first - b * first * tokens
            shown = ", ".join(f"{s}: {c:.3f}" for s, c in costs.items())
            print(f"one {tokens:.0f}-token text repeated, ms a text by batch: {shown}")
            print(f"fit: a run costs {a:.3f} ms + {b:.4f} ms a token: its fixed cost is {a / b:.1f} tokens")


class _Runs:
    """The encoder with `length_runs`' overhead set for this cell (encode_ids reads it per call)."""

    def __init__(self, encoder, overhead: int):
        self.encoder, self.overhead = encoder, overhead

    def encode(self, texts: list[str], batch_size: int):
        from contract.encoding import onnx_encoder

        real = onnx_encoder.length_runs

        def runs(lengths, *, max_rows, max_tokens):
            return real(lengths, max_rows=max_rows, max_tokens=max_tokens, overhead=self.overhead)

        onnx_encoder.length_runs = runs  # type: ignore[assignment]
        try:
            return self.encoder.encode(texts, batch_size=batch_size)
        finally:
            onnx_encoder.length_runs = real


if __name__ == "__main__":
    main()
