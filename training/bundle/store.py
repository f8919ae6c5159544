"""BundleStore: publish bundles atomically, gate them on quality, point CURRENT at the live one.

    <root>/CURRENT       one line: the live version id (replaced with os.replace, never edited)
    <root>/<version>/    published bundles; a published version is never modified
    <root>/gate.jsonl    append-only log of gate decisions and activations
    <root>/.lock         fcntl lock held around publish / activate / prune

Publishing is a sequence of steps (`PUBLISH_STEPS`); each is crash-safe on its own:

1. validate — contract.bundles.bundle.validate with checksums, no model load (a corrupt bundle stops here);
2. gate     — compare metrics["test"][gate_metric] with the live bundle's (and, when a retrain scored
              held-out judged queries, the candidate's nDCG@10 on them with the live model's:
              `_feedback_verdict`); write gate.json and the
              bundle card into the still-private staging folder, and their sha256 into the manifest's
              `files` (so activation refuses an edited gate decision like any other changed file);
3. stage    — copy into `<root>/.staging-<version>` when the staging folder is elsewhere (rename needs
              one filesystem), fsync every file and folder;
4. rename   — write the journal `<root>/.publishing-<version>` (the decision), then `os.rename` to
              `<root>/<version>`: the version appears complete or not at all;
5. current  — if it goes live: write a temp file, fsync, os.replace over CURRENT, fsync the folder;
6. log      — append the decision to gate.jsonl with `made_live` (did this publish point CURRENT at
              it; whether it is live later is what CURRENT says), then remove the journal.

A crash anywhere leaves CURRENT on the old version or the new one, never a torn one; at worst a
complete, unpublished-as-live version (after 4) or a hidden `.staging-*` folder remains. gate.jsonl
never claims what did not happen: a publisher killed between 4 and 6 leaves its journal, and the next
publish (or prune) appends a `publish_interrupted` record saying what is on disk (the version present,
whether CURRENT names it) and removes the journal; it also sweeps the `.CURRENT.*.tmp` a kill during 5
leaves. Tests inject a failure before each step through the `hook` argument (the faiss contrib
checkpoint idiom) and kill -9 a real publisher (tests/app/bundles/test_bundle_faults.py).

Builders stage inside the root (`build_dir()`: `.build-*`, so publishing is a rename) while holding an
flock on its `.lock` sibling. The kernel drops that lock when the builder dies, even by SIGKILL, so the
next publish removes exactly the build folders nobody holds, never a concurrent builder's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from contract.atomic import fsync_dir, fsync_tree, write_json_atomic
from contract.bundles.bundle import (
    CARD_FILE,
    GATE_FILE,
    MANIFEST_FILE,
    VERSION_RE,
    Manifest,
    read_manifest,
    validate,
)
from contract.bundles.folder import (
    CURRENT_FILE,
    GATE_LOG_MAX_BYTES,
    BundleFolder,
    GateDecision,
)
from contract.bundles.parts import sha256_file
from contract.defaults import FEEDBACK_HOLDOUT, GATE_METRIC, GATE_TOLERANCE, KEEP_VERSIONS
from contract.errors import BundleInvalid
from contract.feedback.live_risk import MIN_QUERIES
from contract.jobs.plan import FEEDBACK_KEY, PublicationPlan
from training.cards.bundle_card import write_bundle_card

if TYPE_CHECKING:
    from contract.index.backend import IndexPointer
    from training.data.retrieval_data import RetrievalData

logger = logging.getLogger(__name__)

ORPHAN_LOCK_AGE_S = 60.0
FINGERPRINT_KEY = "eval_fingerprint"  # manifest.extras key written by training.publish.index_model
BUILD_PREFIX = ".build-"
PUBLISH_STEPS = ("validate", "gate", "stage", "rename", "current", "log")
JOURNAL_PREFIX = ".publishing-"
StepHook = Callable[[str], None]


def _seal(staging: Path, manifest: Manifest) -> None:
    """Add gate.json and the bundle card, written at publication, to the manifest's checksums."""
    files = dict(manifest.files) | {name: sha256_file(staging / name) for name in (GATE_FILE, CARD_FILE)}
    sealed = manifest.model_copy(update={"files": files})
    write_json_atomic(staging / MANIFEST_FILE, sealed.model_dump(mode="json"))


def _mode(manifest: Manifest) -> str:
    """The search mode a bundle serves by default; bundles from before hybrid search serve dense."""
    record = manifest.extras.get("retrieval")
    return str(record.get("default_mode", "dense")) if isinstance(record, dict) else "dense"


def evaluation_fingerprint(data: RetrievalData) -> str:
    """sha256 of an evaluation set: every document (id, title, text), query and judgement, in a fixed order."""
    digest = hashlib.sha256()
    for doc_id in sorted(data.corpus):
        doc = data.corpus[doc_id]
        digest.update(json.dumps(["d", doc_id, doc.title, doc.text]).encode())
    for query_id in sorted(data.queries):
        digest.update(json.dumps(["q", query_id, data.queries[query_id]]).encode())
    for query_id in sorted(data.qrels):
        digest.update(json.dumps(["r", query_id, sorted(data.qrels[query_id].items())]).encode())
    return digest.hexdigest()


def _verdict(
    gate_metric: str,
    tolerance: float,
    candidate: tuple[float | None, str | None],
    live: tuple[float | None, str | None],
    live_version: str,
) -> tuple[bool, str]:
    """(accepted, why) for a candidate's and the live version's (metric value, evaluation fingerprint)."""
    (cand, fingerprint), (live_value, live_fingerprint) = candidate, live
    if live_fingerprint != fingerprint:  # different data, or one side unknown: numbers do not compare
        return (
            False,
            f"cannot compare test {gate_metric}: the candidate was evaluated on a different evaluation set "
            f"than live {live_version} ({str(fingerprint)[:12]} vs {str(live_fingerprint)[:12]}); "
            "publish with force to make it live",
        )
    if live_value is None:
        return True, f"live bundle {live_version} has no test {gate_metric}: nothing to compare"
    if cand is None:
        return False, f"candidate has no test {gate_metric}; live {live_version} has {live_value:.4f}"
    return _within(f"test {gate_metric}", cand, live_value, tolerance, f"tolerance {tolerance}")


def _within(what: str, cand: float, live: float, tolerance: float, detail: str) -> tuple[bool, str]:
    """(accepted, why): the one rule of both gate checks, a candidate may trail live by the tolerance."""
    if cand >= live - tolerance:
        return True, f"{what} {cand:.4f} vs live {live:.4f} ({detail})"
    return False, f"{what} {cand:.4f} is worse than live {live:.4f} by more than {tolerance}"


# held-out judged queries the gate needs to compare on: the held-out share of the fewest judged queries the
# live section gives a verdict on (contract/feedback/live_risk.py), 4 of 20; fewer say nothing reliable
FEEDBACK_GATE_MIN_QUERIES = round(FEEDBACK_HOLDOUT * MIN_QUERIES)


def _feedback_verdict(
    accepted: tuple[bool, str], heldout: dict[str, Any] | None, tolerance: float, live_version: str
) -> tuple[bool, str]:
    """The test verdict, then the held-out judged queries (a retrain's feedback slice, scored by the
    candidate and the live model in the same run): a candidate worse there than the live model by more
    than the tolerance is kept as a candidate. Those queries are the traffic the service now answers, the
    population a drift retrain (SEARCH_RETRAIN_ON_DRIFT) is meant to serve better, so passing the static
    test split while losing on them is a regression. Compared only at FEEDBACK_GATE_MIN_QUERIES or more
    and against the version live now; otherwise the reason says why not."""
    ok, reason = accepted
    if not ok or not heldout or heldout.get("candidate_ndcg@10") is None:
        return ok, reason
    cand, live, n = heldout["candidate_ndcg@10"], heldout.get("live_ndcg@10"), int(heldout.get("queries", 0))
    if live is None or heldout.get("live_version") != live_version:
        return ok, f"{reason}; held-out feedback not compared (scored against {heldout.get('live_version')})"
    if n < FEEDBACK_GATE_MIN_QUERIES:
        return ok, f"{reason}; held-out feedback not gated ({n} < {FEEDBACK_GATE_MIN_QUERIES} queries)"
    held_ok, why = _within("held-out feedback nDCG@10", cand, live, tolerance, f"{n} queries")
    return (True, f"{reason}; {why}") if held_ok else (False, why)


class PublishResult(BaseModel):
    version: str
    live: bool
    reason: str


class BundleStore(BundleFolder):
    """A BundleFolder that also publishes: build folders, the quality gate, pruning."""

    def __init__(
        self,
        root: str | Path,
        keep: int = KEEP_VERSIONS,
        gate_log_max_bytes: int = GATE_LOG_MAX_BYTES,
        pointer: IndexPointer | None = None,
    ):
        super().__init__(root, gate_log_max_bytes, pointer=pointer)
        self.keep = keep

    @contextmanager
    def build_dir(self) -> Iterator[Path]:
        """A private folder inside the root to stage one bundle in; removed on exit unless published.

        The lock file is created and locked before the folder exists and removed after it is gone, so a
        `.build-*` folder without a held lock is always a dead builder's.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        fd, lock_name = tempfile.mkstemp(dir=self.root, prefix=BUILD_PREFIX, suffix=".lock")
        lock = Path(lock_name)
        staging = lock.with_suffix("")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            staging.mkdir()
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already when publishing renamed it
            lock.unlink(missing_ok=True)
            os.close(fd)

    def publish(
        self,
        staging_dir: str | Path,
        *,
        gate: PublicationPlan | None = None,
        force: bool = False,
        hook: StepHook | None = None,
    ) -> PublishResult:
        """Publish a staged bundle as a new version; make it live if it passes the quality gate: the plan's
        publication group (metric, tolerance, force) when a run brings one, else the project's defaults
        with `force`."""
        gate_metric, tolerance, force = (
            gate.gate if gate is not None else (GATE_METRIC, GATE_TOLERANCE, force)
        )
        step = hook or (lambda name: None)
        staging = Path(staging_dir)
        with self._locked():
            self._clean_stale()
            step("validate")
            manifest = validate(
                staging, index_opener=self.index_opener()
            )  # the cheap check: the model is not loaded to publish it
            if (self.root / manifest.version).exists():
                raise BundleInvalid(f"version {manifest.version} is already published in {self.root}")
            step("gate")
            fingerprint = manifest.extras.get(FINGERPRINT_KEY)
            decision = self._gate(
                manifest.version, manifest.metrics, gate_metric, tolerance, force, fingerprint, _mode(manifest),
                heldout=(manifest.extras.get(FEEDBACK_KEY) or {}).get("heldout"),
            )  # fmt: skip
            write_json_atomic(staging / GATE_FILE, decision.model_dump(mode="json"))
            write_bundle_card(staging, manifest.model_dump(mode="json"), decision.model_dump(mode="json"))
            _seal(staging, manifest)
            step("stage")
            if staging.resolve().parent != self.root.resolve():
                private = self.root / f".staging-{manifest.version}"
                shutil.copytree(staging, private)
            else:
                private = staging
            fsync_tree(private)
            step("rename")
            final = self.root / manifest.version
            journal = self.root / f"{JOURNAL_PREFIX}{manifest.version}"
            write_json_atomic(journal, decision.model_dump(mode="json"))
            os.rename(private, final)
            fsync_dir(self.root)
            step("current")
            if decision.accepted:
                self._set_current(manifest.version)
            step("log")
            self._log(
                {"event": "publish", **decision.model_dump(mode="json"), "made_live": decision.accepted}
            )
            journal.unlink()
            if private != staging:
                shutil.rmtree(staging, ignore_errors=True)
            self._prune(self.keep)
        logger.info("published %s: live=%s (%s)", manifest.version, decision.accepted, decision.reason)
        return PublishResult(version=manifest.version, live=decision.accepted, reason=decision.reason)

    def prune(self, keep: int | None = None) -> list[str]:
        """Delete all but the newest `keep` versions; the live one is always kept. Returns deleted ids."""
        with self._locked():
            self._clean_stale()
            return self._prune(self.keep if keep is None else keep)

    # -- internals ----------------------------------------------------------------------------------
    def _gate(
        self,
        version: str,
        metrics: dict[str, dict[str, float]],
        gate_metric: str,
        tolerance: float,
        force: bool,
        fingerprint: str | None = None,
        mode: str = "dense",
        heldout: dict[str, Any] | None = None,
    ) -> GateDecision:
        now = datetime.now(UTC)
        cand = metrics.get("test", {}).get(gate_metric)
        live_version = self.current_version()
        common = {
            "version": version,
            "metric": gate_metric,
            "candidate_value": cand,
            "tolerance": tolerance,
            "forced": force,
            "decided_at": now,
            "live_version": live_version,
            "eval_fingerprint": fingerprint,
            "candidate_mode": mode,
        }
        if live_version is None or not (self.root / live_version).is_dir():
            return GateDecision(accepted=True, reason="first bundle: nothing live to compare with", **common)
        live_manifest = read_manifest(self.root / live_version)
        live_value = live_manifest.metrics.get("test", {}).get(gate_metric)
        live_fingerprint = live_manifest.extras.get(FINGERPRINT_KEY)
        common["live_value"] = live_value
        common["live_eval_fingerprint"] = live_fingerprint
        common["live_mode"] = _mode(live_manifest)
        ok, reason = _feedback_verdict(
            _verdict(
                gate_metric, tolerance, (cand, fingerprint), (live_value, live_fingerprint), live_version
            ),
            heldout,
            tolerance,
            live_version,
        )
        if force and not ok:
            return GateDecision(accepted=True, reason=f"forced: {reason}", **common)
        return GateDecision(accepted=ok, reason=reason if ok else f"kept as candidate: {reason}", **common)

    def _clean_stale(self) -> None:
        # under the lock no other writer exists, so any hidden staging/trash folder is left from a crash,
        # and so is a journal (a publisher died after its rename) or a temp file of an atomic CURRENT write
        for path in self.root.iterdir():
            if path.name.startswith(JOURNAL_PREFIX):
                self._record_interrupted(path)
            elif path.name.startswith(f".{CURRENT_FILE}.") and path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
            elif path.is_dir() and path.name.startswith((".staging-", ".trash-")):
                shutil.rmtree(path, ignore_errors=True)
            elif path.name.startswith(BUILD_PREFIX) and not path.name.endswith(".lock"):
                self._clean_build(path)
            elif path.name.startswith(BUILD_PREFIX) and not path.with_suffix("").exists():
                self._clean_orphan_lock(path)

    def _record_interrupted(self, journal: Path) -> None:
        """Say in gate.jsonl what a publisher that died after its rename left: the decision it had taken,
        whether its version is on disk and whether CURRENT names it."""
        version = journal.name.removeprefix(JOURNAL_PREFIX)
        try:
            decision = json.loads(journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            decision = {}
        try:
            current = self.current_version()
        except BundleInvalid:
            current = None
        present = (self.root / version).is_dir()
        live = current == version
        self._log(
            {
                "event": "publish_interrupted",
                "version": version,
                "accepted": bool(decision.get("accepted")) if isinstance(decision, dict) else None,
                "made_live": live,
                "reason": (
                    f"the publisher stopped before recording its decision: version {version} is "
                    f"{'published' if present else 'absent'} and "
                    f"{'live (CURRENT names it)' if live else f'not live (CURRENT names {current})'}"
                ),
                "decided_at": datetime.now(UTC).isoformat(),
            }
        )
        journal.unlink(missing_ok=True)

    def _clean_orphan_lock(self, lock: Path) -> None:
        """Remove a `.build-*.lock` whose folder is gone (its builder died between the two removals).

        build_dir() creates the lock file a moment before it locks it and makes the folder, so only a lock
        older than ORPHAN_LOCK_AGE_S that nobody holds is an orphan.
        """
        try:
            if time.time() - lock.stat().st_mtime < ORPHAN_LOCK_AGE_S:
                return
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        else:
            logger.info("removing %s, left by a build that died", lock.name)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def _clean_build(self, path: Path) -> None:
        """Remove a `.build-*` folder (and its lock file) unless a live builder holds its lock."""
        lock = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:  # the lock outlives the folder, so this builder is gone
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a builder is still working in it
        else:
            logger.info("removing %s, left by a build that died", path.name)
            shutil.rmtree(path, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def _prune(self, keep: int) -> list[str]:
        live = self.current_version()
        versions = sorted(p.name for p in self.root.iterdir() if p.is_dir() and VERSION_RE.match(p.name))
        keep_set = set(versions[-keep:] if keep > 0 else []) | ({live} if live else set())
        deleted = []
        for version in versions:
            if version in keep_set:
                continue
            if self.pointer is not None:
                with contextlib.suppress(BundleInvalid):  # an unreadable manifest has no collection to name
                    self.pointer.on_delete(read_manifest(self.root / version))
            trash = self.root / f".trash-{version}"
            os.rename(self.root / version, trash)  # disappears atomically from list_versions
            shutil.rmtree(trash, ignore_errors=True)
            deleted.append(version)
        if deleted:
            logger.info("pruned %d old version(s): %s", len(deleted), ", ".join(deleted))
        return deleted
