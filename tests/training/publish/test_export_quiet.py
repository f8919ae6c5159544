"""The ONNX export keeps library chatter out (issue 32): no TracerWarning or exporter UserWarning from
torch, and no root-logger WARNING from onnxruntime's quantizer, on stderr or in the log, while the
project's own INFO line still comes through. The real export of the packaged encoder, fp32 and int8."""

from __future__ import annotations

import logging
import warnings

from contract.log_setup import configure_logging
from training.export.onnx_export import export_onnx


def test_the_export_prints_no_library_warnings(tmp_path, shared_encoder, capfd, caplog):
    model = shared_encoder.save(tmp_path / "model")
    configure_logging("INFO", "text")  # as the CLI does: root at WARNING, the project's loggers at INFO
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as shown, caplog.at_level(logging.INFO, logger="training"):
        warnings.simplefilter("always")  # every warning recorded, none hidden by an earlier "once"
        info = export_onnx(model, quantize=True)
    err = capfd.readouterr().err
    assert set(info.files) == {"fp32", "int8"}
    # what Python shows a user by default: DeprecationWarnings outside __main__ are hidden anyway
    visible = [w for w in shown if not issubclass(w.category, DeprecationWarning | PendingDeprecationWarning)]
    assert [f"{w.category.__name__}: {w.message}" for w in visible] == []
    assert "TracerWarning" not in err and "pre-processing before quantization" not in err, err
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    assert any(r.name == "training.export.onnx_export" for r in caplog.records)  # our own line kept
    # the silencing is scoped to the export: the root logger has no filter left behind
    assert logging.getLogger().filters == []
