"""A 15,000-document real corpus shaped like the retrain-cost issue's (short package text, 3,000 training
queries), built from the docstrings of the Python packages installed beside the project.

    .venv/bin/python -m bench packages_corpus OUT [--docs 15000] [--train 3000] [--test 500] [--seed 0]

The pairs are the demo dataset's (training/data/demo_data.py: docstring summary → the rest of the
docstring, titled with the object's qualified name), harvested from site-packages instead of the standard
library (~33k usable objects in this project's virtual environment), so the corpus is real text a tuned
model can encode, unlike bench/training/retrain_scale.py's synthetic distractors. Every document is the positive of
one query; a seeded `--train` of the training queries are kept in qrels/train.tsv and the rest dropped, so
most documents are distractors to the training pairs, as in a real corpus. Feed OUT to
`bench/training/retrain_scale.py WORK --data OUT --sizes 0 --full-sizes 0` to time both retrain shapes at 15k.
The output depends on the installed packages (fixed by the project's pins) and the seed.
"""

from __future__ import annotations

import argparse
import random
import sysconfig
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--docs", type=int, default=15000)
    parser.add_argument("--train", type=int, default=3000, help="training queries kept")
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from training.data.demo_data import harvest, sample_and_write

    root = Path(sysconfig.get_paths()["purelib"])
    pairs = harvest(root)
    print(f"{len(pairs)} usable docstrings under the installed site-packages", flush=True)

    def readme(n_usable: int, n_docs: int, n_train: int, n_test: int, seed: int) -> str:
        return (
            "# Installed packages' docstrings (bench/training/packages_corpus.py)\n\n"
            f"{n_usable} usable objects; {n_docs} sampled (seed {seed}); {args.train} of the {n_train} "
            f"training queries kept, {n_test} test queries. Query = docstring summary, document = the rest.\n"
        )

    out = sample_and_write(
        args.out,
        pairs,
        n_docs=args.docs,
        n_test=args.test,
        seed=args.seed,
        readme=readme,
        what="packages corpus",
    )
    train_file = out / "qrels" / "train.tsv"
    header, *rows = train_file.read_text(encoding="utf-8").splitlines()
    kept = sorted(random.Random(args.seed).sample(range(len(rows)), min(args.train, len(rows))))
    train_file.write_text("\n".join([header, *(rows[i] for i in kept)]) + "\n", encoding="utf-8")
    print(f"{out}: {args.docs} documents, {len(kept)} training queries, {args.test} test queries", flush=True)


if __name__ == "__main__":
    main()
