"""Domain errors raised by the training side and the contract modules the API imports.

InfonceSearchError            base: a user-facing message, never a library stack trace
├── DataError                 a dataset file is malformed (names the file, line and field)
├── ConfigError               an option or config value is invalid
├── ModelLoadError            a model folder cannot be loaded as a sentence-transformers model
├── IndexBuildError           FAISS could not build or tune the requested index
├── InvalidQuery              a search the index cannot answer as asked (query shape, k, positions)
├── BundleError               anything about versioned bundles
│   ├── BundleInvalid         a bundle on disk is corrupt, partial or inconsistent (never made live)
│   ├── BundleNotFound        no bundle with that version
│   ├── BundleDamaged         a part of the live bundle failed while serving (the replica falls back)
│   └── NoLiveBundle          nothing is published yet (CURRENT missing)
├── CollectionError           collections and aliases (contract/bundles/collections.py)
│   ├── CollectionRefused     a name that is not a collection name, or a folder that leads out of the root
│   ├── CollectionNotFound    no collection (or alias) with that name
│   └── CollectionConflict    the name is taken, the default cannot go, jobs or aliases still use it
└── JobError                  job queue problems
    ├── JobNotFound           unknown job id
    ├── JobConflict           the job's state forbids the request (e.g. cancelling a finished job)
    ├── DatasetRefused        a dataset name resolves outside the configured data root
    │   └── ModelRefused      a base model resolves outside the models root
    ├── DatasetNotFound       no dataset with that name under the data root
    ├── JobOptionsInvalid     job options fail validation (names the field)
    └── JobCancelled          raised inside a running job when its cancellation was requested

The API maps these to HTTP status codes in one handler (app/errors.py); the CLI prints the message and
exits non-zero.
"""

from __future__ import annotations

from pathlib import Path


class InfonceSearchError(Exception):
    """Base class: `str(error)` is a complete, user-facing sentence."""

    code = "error"


class DataError(InfonceSearchError):
    """A dataset file is malformed. The message names the file, the 1-based line and the field."""

    code = "bad_data"

    def __init__(self, path: str | Path, message: str, *, line: int | None = None, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f" field '{field}'" if field else ""
        super().__init__(f"{where}:{what} {message}".replace(": ", ": ", 1))


class ConfigError(InfonceSearchError):
    code = "bad_config"


class ModelLoadError(InfonceSearchError):
    code = "model_load_failed"


class IndexBuildError(InfonceSearchError):
    code = "index_build_failed"


class InvalidQuery(InfonceSearchError):
    """Bad search input (the client's fault, 422), as opposed to an index that failed to build."""

    code = "invalid_request"  # the API's code for every well-formed body it cannot answer


class IndexUnavailable(InfonceSearchError):
    """The index backend (a Milvus server) cannot be reached or failed a request: retry later (503)."""

    code = "index_unavailable"


class BundleError(InfonceSearchError):
    code = "bundle_error"


class BundleInvalid(BundleError):
    code = "bundle_invalid"


class BundleNotFound(BundleError):
    code = "bundle_not_found"


class BundleDamaged(BundleError):
    """A file of a loaded bundle failed at request time (changed or damaged on disk since it loaded)."""

    code = "bundle_damaged"


class NoLiveBundle(BundleError):
    code = "no_live_bundle"


class CollectionError(InfonceSearchError):
    code = "collection_error"


class CollectionRefused(CollectionError):
    """A collection or alias name that is not `^[a-z0-9][a-z0-9_-]{0,62}$`, or whose folder leads out of
    the collections root (a symbolic link)."""

    code = "collection_refused"


class CollectionNotFound(CollectionError):
    code = "collection_not_found"


class CollectionConflict(CollectionError):
    """The request contradicts the collections' state: a name already taken (by a collection or an
    alias), deleting `default`, a collection that jobs or aliases still use, an alias naming an alias."""

    code = "collection_conflict"


class JobError(InfonceSearchError):
    code = "job_error"


class JobNotFound(JobError):
    code = "job_not_found"


class JobConflict(JobError):
    code = "job_conflict"


class DatasetRefused(JobError):
    """A job would read a file outside the data root (or a split that is not a plain name)."""

    code = "dataset_refused"


class ModelRefused(DatasetRefused):
    """A job's base model is outside the models root."""

    code = "model_refused"


class DatasetNotFound(JobError):
    code = "dataset_not_found"


class JobOptionsInvalid(JobError):
    """Job options fail validation; `field` names the offending option."""

    code = "job_options_invalid"

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"options.{field}: {message}" if field else f"options: {message}")


class JobCancelled(JobError):
    code = "job_cancelled"
