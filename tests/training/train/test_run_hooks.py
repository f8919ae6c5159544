"""RunHooks.split parses a dataset's split once per run: a BEIR folder's whatever the seed (the seed draws
only a pairs file's held-out side), a pairs file's once per seed."""

from __future__ import annotations

import json

import training.data.split as split_module
from training.train.run_hooks import RunHooks


def _counting(monkeypatch) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []
    real = split_module.load_split

    def load_split(path, split, **kw):
        calls.append((split, kw.get("seed", 0)))
        return real(path, split, **kw)

    monkeypatch.setattr(split_module, "load_split", load_split)
    return calls


def test_a_beir_split_is_parsed_once_whatever_the_seed(demo_dataset, monkeypatch):
    calls = _counting(monkeypatch)
    hooks = RunHooks()
    first = hooks.split(demo_dataset, "test")  # the gate and the scope check: no seed
    again = hooks.split(demo_dataset, "test", seed=7)  # the trainer: its config's
    assert again is first and calls == [("test", 0)]
    hooks.split(demo_dataset, "train", seed=7)
    assert calls == [("test", 0), ("train", 7)]


def test_a_pairs_files_sides_are_kept_apart_per_seed(tmp_path, monkeypatch):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"query": f"question {i}", "positive": f"answer {i} with some words"} for i in range(40)]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    calls = _counting(monkeypatch)
    hooks = RunHooks()
    zero, seven = hooks.split(pairs, "test"), hooks.split(pairs, "test", seed=7)
    assert hooks.split(pairs, "test", seed=7) is seven and calls == [("test", 0), ("test", 7)]
    assert set(zero.queries) != set(seven.queries)  # another seed holds out other pairs
