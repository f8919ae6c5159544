"""Issue 44 item 6: the demo's log carried three lines nobody could act on; each is silenced where it is
made, and only there."""

from __future__ import annotations

import copy
import logging
import warnings

import numpy as np

from training.distill.loop import read_only_tensor
from training.distill.students import token_counts


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_counting_a_long_document_logs_no_sequence_length_warning(shared_encoder):
    # a copy whose once-per-tokenizer warning has not been given yet; transformers' logger does not
    # propagate (caplog never sees it), so a handler listens on it directly
    tokenizer = copy.deepcopy(shared_encoder.model.tokenizer)
    tokenizer.deprecation_warnings = {}
    lines = _Lines()
    logging.getLogger("transformers").addHandler(lines)
    try:
        counts = token_counts(tokenizer, ["regeneration " * 2000, "a short one"])  # past the 256/512 limit
    finally:
        logging.getLogger("transformers").removeHandler(lines)
    assert counts.sum() >= 2000  # every token was counted, none truncated
    assert not [line for line in lines.lines if "sequence length" in line], lines.lines


def test_a_read_only_memory_map_becomes_a_shared_tensor_without_a_warning(tmp_path):
    path = tmp_path / "docs.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(3, 4))
    mapped = np.load(path, mmap_mode="r")  # read-only, as the corpus vectors are
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning torch gives, if it came, would fail here
        tensor = read_only_tensor(mapped)
    assert tensor.shape == (3, 4) and float(tensor[2, 3]) == 11.0
    assert tensor.data_ptr() == mapped.ctypes.data  # shared, not copied
