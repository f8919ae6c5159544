"""RunHooks: what a run reports to and is steered by, apart from its plan (contract/jobs/plan.py): the
plan says what to build, the hooks how this process watches it. One object instead of five keywords on
run_pipeline, index_model and query_side_retrain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.eval.embedding_cache import EmbeddingCache
    from training.train.phase_timer import PhaseTimer
    from training.train.step import ProgressFn


@dataclass
class RunHooks:
    """`on_progress` sees every training step (and may raise to stop); `checkpoint` is called between
    phases and every 1,024 documents encoded, and cancels by raising (a job's cancel); `timer` records
    each phase's wall time; `cache` holds corpus embeddings across runs; `show_progress`: tqdm bars (a
    terminal) or none (a worker, whose progress goes to the job record)."""

    on_progress: ProgressFn | None = None
    show_progress: bool = True
    checkpoint: Callable[[], None] | None = None
    timer: PhaseTimer | None = None
    cache: EmbeddingCache | None = None

    def stop(self) -> None:
        """The checkpoint, when there is one."""
        if self.checkpoint is not None:
            self.checkpoint()
