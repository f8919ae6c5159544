"""RunHooks: what a run reports to and is steered by, apart from its plan (contract/jobs/plan.py): the
plan says what to build, the hooks how this process watches it. One object instead of five keywords on
run_pipeline, index_model and query_side_retrain. It also holds the splits the run has loaded, so the
evaluation split read by the scope check, the live reference, the index and the query side is parsed
once per run, not once per reader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.data.retrieval_data import RetrievalData
    from training.eval.embedding_cache import EmbeddingCache
    from training.train.phase_timer import PhaseTimer
    from training.train.step import ProgressFn


@dataclass
class RunHooks:
    """`on_progress` sees every training step (and may raise to stop); `checkpoint` is called between
    phases and every 1,024 documents encoded, and cancels by raising (a job's cancel); `timer` records
    each phase's wall time; `cache` holds corpus embeddings across runs; `show_progress`: tqdm bars (a
    terminal) or none (a worker, whose progress goes to the job record); `publishes` / `distills`: what a
    time budget reserves time for after training."""

    on_progress: ProgressFn | None = None
    show_progress: bool = True
    checkpoint: Callable[[], None] | None = None
    timer: PhaseTimer | None = None
    cache: EmbeddingCache | None = None
    # what follows training, for a time budget's reserve (training/train/budget.py): a bundle published
    # (the pipeline), with its distilled query encoders
    publishes: bool = False
    distills: bool = False
    loaded: dict[tuple[str, str, int | None], RetrievalData] = field(default_factory=dict, repr=False)

    def stop(self) -> None:
        """The checkpoint, when there is one."""
        if self.checkpoint is not None:
            self.checkpoint()

    def split(self, data_dir: str | Path, name: str, seed: int = 0) -> RetrievalData:
        """training.data.split.load_split, once per (dataset, split) in this run; its readers only read. The
        seed draws only a pairs file's held-out side, so a BEIR folder's split is one entry whatever the seed
        (the trainer passes its config's, the gate and the scope check none)."""
        key = self._key(data_dir, name, seed)
        if key not in self.loaded:
            from training.data.split import load_split

            self.loaded[key] = load_split(data_dir, name, seed=seed)
        return self.loaded[key]

    def preload(self, data_dir: str | Path, name: str, data: RetrievalData, seed: int = 0) -> None:
        """Make `split(data_dir, name, seed)` answer `data` in this run: the training split a retrain
        extends with relevance feedback (training/feedback/), read by every reader of the run alike."""
        self.loaded[self._key(data_dir, name, seed)] = data

    @staticmethod
    def _key(data_dir: str | Path, name: str, seed: int) -> tuple[str, str, int | None]:
        return (str(data_dir), name, None if Path(data_dir).is_dir() else seed)
