"""HotSwap (app/live/hot_swap.py) races, made deterministic by acting at the exact moment that matters.

The load-dependent version of these lives in test_lifecycle.py (hot swap under concurrent requests).
"""

from __future__ import annotations

import asyncio
import time

from app.live.hot_swap import HotSwap
from app.metrics import AppMetrics
from tests.app.conftest import make_settings, publish
from training.bundle.store import BundleStore


def test_a_load_that_current_moved_away_from_is_not_swapped_in(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    store = BundleStore(bundles)
    hot_swap = HotSwap(make_settings(bundles, reload_poll_seconds=0), AppMetrics())
    real_open = hot_swap._open

    def open_while_another_process_rolls_back(version: str):
        live = real_open(version)
        store.activate(a)  # CURRENT moves back to a after this process read it, before it swaps
        return live

    async def scenario() -> str:
        await hot_swap.sync()
        assert hot_swap.live is not None and hot_swap.live.version == a
        b = publish(staged["B"], bundles)
        assert store.current_version() == b
        hot_swap._open = open_while_another_process_rolls_back  # type: ignore[method-assign]
        await hot_swap.sync()  # loads b; CURRENT says a by the time the load is done
        return b

    b = asyncio.run(scenario())
    assert b != a
    assert hot_swap.live is not None and hot_swap.live.version == a, "a stale version was swapped in"
    assert store.current_version() == a
    assert b not in hot_swap._failed  # not a failure: a later poll may load b again if CURRENT names it


def test_polls_during_an_activation_never_swap_the_old_version_back(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles)
    store = BundleStore(bundles)
    store.activate(a)
    hot_swap = HotSwap(make_settings(bundles, reload_poll_seconds=0), AppMetrics())
    seen: list[tuple[str | None, str | None]] = []
    real_activate = hot_swap.folder.activate

    def slow_current_write(version: str) -> None:
        time.sleep(0.3)  # widen the window between the swap and the CURRENT write
        real_activate(version)

    hot_swap.folder.activate = slow_current_write  # type: ignore[method-assign]

    async def scenario() -> None:
        await hot_swap.sync()
        assert hot_swap.live is not None and hot_swap.live.version == a
        activation = asyncio.create_task(hot_swap.activate(b))
        await asyncio.sleep(0)  # activation holds the lock and is loading b in a thread
        polls = [asyncio.create_task(hot_swap.sync()) for _ in range(3)]  # what the poller would do now
        await activation
        seen.append((hot_swap.live.version if hot_swap.live else None, store.current_version()))
        await asyncio.gather(*polls)

    asyncio.run(scenario())
    assert seen == [(b, b)]  # activation finished with live and CURRENT agreeing
    assert hot_swap.live is not None and hot_swap.live.version == b, "a poll swapped the old version back in"
    assert store.current_version() == b


def test_activation_loads_the_model_once_and_publishing_never(tmp_path, staged, monkeypatch):
    """validate() is the only check publish and BundleFolder.activate run: the one model load of an
    activation through the API is the load of the bundle it then serves — none at all when that bundle's
    model files are those of a model already loaded (contract/encoding/shared_models.py)."""
    import weakref

    from contract.encoding import shared_models
    from contract.encoding.encoder import Encoder

    monkeypatch.setattr(shared_models, "_objects", weakref.WeakValueDictionary())  # nothing loaded yet

    loads: list[str] = []
    real_load = Encoder.load.__func__  # type: ignore[attr-defined]

    def counting_load(cls, path=None, **kwargs):
        loads.append(str(path))
        return real_load(cls, path, **kwargs)

    monkeypatch.setattr(Encoder, "load", classmethod(counting_load))
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)  # worse test metric: published, not live
    assert loads == []  # publishing validates without loading the model
    BundleStore(bundles).activate(b)  # the CLI's roll forward: validate only
    BundleStore(bundles).activate(a)
    assert loads == []
    hot_swap = HotSwap(make_settings(bundles, reload_poll_seconds=0), AppMetrics())

    async def scenario() -> None:
        await hot_swap.sync()  # serves a: one load
        assert len(loads) == 1
        served_a = hot_swap.live
        await hot_swap.activate(b)  # load b to serve it, then point CURRENT at it
        assert hot_swap.live is not None and hot_swap.live.version == b
        # b was built with a's encoder: same model files, so the loaded model is shared, not loaded again
        assert served_a is not None and hot_swap.live.encoder.model is served_a.encoder.model
        assert hot_swap.live.encoder.source.endswith(f"{b}/model")

    asyncio.run(scenario())
    assert len(loads) == 1
    assert BundleStore(bundles).current_version() == b


def _with_other_encoder(staged_dir, tmp_path):
    """A copy of a staged bundle whose encoder has another identity (its similarity.json's temperature
    differs: the same vectors, another `encoder_key`), under a new version id."""
    import json
    import os
    import shutil

    from contract.bundles.bundle import checksums, new_version_id

    copy = tmp_path / f"other-encoder-{staged_dir.name}"
    shutil.copytree(staged_dir, copy, copy_function=os.link)
    sim = copy / "model" / "similarity.json"
    data = json.loads(sim.read_text()) | {"temperature": 0.07}
    sim.unlink()  # hard-linked to the session's staged bundle: never write through it
    sim.write_text(json.dumps(data))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest |= {"version": new_version_id(), "files": checksums(copy)}
    (copy / "manifest.json").unlink()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_activation_re_encodes_each_logged_document_once_per_encoder(tmp_path, staged, caplog):
    """Issue 27, item 10: switching encoders re-encoded the whole mutation log inside every activation.
    Vectors made for an encoder are kept in the log, so going back to an encoder re-encodes nothing."""
    import logging

    from fastapi.testclient import TestClient

    from app.main import create_app

    caplog.set_level(logging.INFO, logger="app.live.mutation_applier")
    bundles = tmp_path / "bundles"
    first = publish(staged["A"], bundles)
    other = publish(_with_other_encoder(staged["B"], tmp_path), bundles, force=False)
    key = {"X-API-Key": "test-key"}
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        docs = [{"id": f"n{i}", "text": f"a new document about cells number {i}"} for i in range(6)]
        assert client.post("/documents", json={"documents": docs}, headers=key).status_code == 200

        def activate(version: str) -> int:
            caplog.clear()
            assert client.post(f"/bundles/{version}/activate", headers=key).status_code == 200
            hits = client.post("/search", json={"query": "a new document about cells number 3"}).json()
            assert hits["version"] == version and hits["results"][0]["hits"][0]["id"] == "n3"
            return sum(
                int(r.getMessage().split()[1])
                for r in caplog.records
                if r.getMessage().startswith("re-encoding")
            )

        assert activate(other) == 6  # the first time this encoder serves them
        assert activate(first) == 0  # written with this encoder
        assert activate(other) == 0  # encoded once already: reused from the log
