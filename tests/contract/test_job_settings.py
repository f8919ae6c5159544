"""The worker and the operator CLIs read the API's settings: the same SEARCH_ variables, parsed by the same
pydantic-settings class (contract.jobs.settings.JobSettings, which app.settings.Settings subclasses)."""

from __future__ import annotations

import inspect
import os

import pytest
import typer
from typer.testing import CliRunner

from app.settings import Settings
from contract.jobs.settings import JobSettings
from training.cli.bundles import bundles_app
from training.cli.jobs import jobs_app, worker, worker_settings

SHARED = sorted(JobSettings.model_fields)


@pytest.fixture
def env(monkeypatch, tmp_path):
    """Only the variables a test sets: none inherited from the shell running the suite."""
    for name in list(os.environ):
        if name.startswith("SEARCH_"):
            monkeypatch.delenv(name)
    return lambda **values: [monkeypatch.setenv(f"SEARCH_{k.upper()}", str(v)) for k, v in values.items()]


def _worker_effective(args: list[str]) -> JobSettings:
    """Parse a worker command line with the real option declarations, then resolve it as the worker does."""
    app = typer.Typer()
    app.command()(worker)
    params = typer.main.get_command(app).make_context("worker", args).params
    return worker_settings(**{name: params[name] for name in inspect.signature(worker_settings).parameters})


def test_the_api_settings_are_job_settings_plus_serving_fields():
    assert issubclass(Settings, JobSettings)
    for name in SHARED:
        assert Settings.model_fields[name].description, (
            name
        )  # documented once, in the table of docs/settings.md


def test_the_worker_reads_what_the_api_reads_for_every_shared_variable(env, tmp_path):
    env(
        bundles_dir=tmp_path / "served" / "bundles",
        queue_url=f"sqlite:///{tmp_path / 'q' / 'jobs.db'}",
        data_root=tmp_path / "datasets",
        models_root=tmp_path / "base-models",
        job_heartbeat_timeout_s="12.5",
        train_device="cpu",
        log_format="json",
        milvus_uri="http://milvus:19530",
        milvus_token="root:Milvus",
        milvus_name="scifact",
    )
    api = Settings().model_dump(include=set(SHARED))
    worker_side = _worker_effective([]).model_dump()
    assert worker_side == api
    assert (
        worker_side["job_heartbeat_timeout_s"] == 12.5 and worker_side["train_device"] == "cpu"
    )  # not defaults


def test_with_nothing_set_both_sides_agree_on_the_defaults(env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    api = Settings().model_dump(include=set(SHARED))
    assert _worker_effective([]).model_dump() == api
    assert api["queue_url"] == "sqlite:///jobs.db"  # beside the default bundles folder, on both sides


def test_the_queue_default_follows_the_bundles_folder_on_both_sides(env, tmp_path):
    env(bundles_dir=tmp_path / "srv" / "bundles")
    expected = f"sqlite:///{(tmp_path / 'srv' / 'jobs.db').as_posix()}"
    assert Settings().queue_url == expected
    assert _worker_effective([]).queue_url == expected
    other = tmp_path / "elsewhere" / "bundles"
    assert (
        _worker_effective(["--bundles", str(other)]).queue_url
        == f"sqlite:///{(other.parent / 'jobs.db').as_posix()}"
    )


def test_command_line_options_override_the_environment(env, tmp_path):
    env(job_heartbeat_timeout_s="12.5", train_device="cpu", milvus_name="scifact", log_format="json")
    effective = _worker_effective(["--heartbeat-timeout", "3", "--device", "cuda", "--milvus-name", "other"])
    assert (effective.job_heartbeat_timeout_s, effective.train_device, effective.milvus_name) == (
        3.0,
        "cuda",
        "other",
    )
    assert effective.log_format == "json"  # not given: still the environment's


def test_a_value_the_api_refuses_is_a_one_line_cli_error_naming_the_variable(env, tmp_path):
    env(job_heartbeat_timeout_s="0", bundles_dir=tmp_path / "bundles")
    with pytest.raises(Exception, match="greater than 0"):
        Settings()
    done = CliRunner().invoke(jobs_app, ["list"])
    assert done.exit_code == 2
    assert "SEARCH_JOB_HEARTBEAT_TIMEOUT_S" in done.output and "greater than 0" in done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1


def test_the_bundles_cli_uses_the_api_bundles_folder(env, tmp_path):
    env(bundles_dir=tmp_path / "missing-bundles")
    done = CliRunner().invoke(bundles_app, ["list"])
    assert done.exit_code == 2
    assert f"--bundles {tmp_path / 'missing-bundles'}: no such folder" in done.output


def test_the_publishers_milvus_options_are_the_api_milvus_settings(env):
    from training.cli.publish_options import backend_config

    env(milvus_uri="http://milvus:19530", milvus_token="root:Milvus", milvus_name="scifact")
    api = Settings(index_backend="milvus")
    published = backend_config("milvus", None, None, None)
    assert (published.milvus_uri, published.milvus_token, published.milvus_name) == (
        api.milvus_uri,
        api.milvus_token,
        api.milvus_name,
    )
    assert backend_config("milvus", None, None, "other").milvus_name == "other"  # --milvus-name wins
