"""The heap frozen out of the collector's full collections (app/live/heap_freeze.py): frozen once the app is
up, collectable again the moment a bundle goes live, frozen again after the settle time, given back as it
was at shutdown."""

from __future__ import annotations

import gc
import weakref

from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings, publish, wait_until


class _Marker:
    """Stands for any object of a bundle caught in a reference cycle (refcounting alone never frees it)."""


def test_the_heap_is_frozen_once_up_and_unfrozen_at_shutdown(tmp_path, staged):
    bundles = tmp_path / "bundles"
    publish(staged["A"], bundles)
    assert gc.get_freeze_count() == 0
    with TestClient(create_app(make_settings(bundles, gc_freeze_settle_s=30))) as client:
        heap = client.app.state.collections.heap
        assert heap.frozen > 10_000  # the imported libraries and the bundle, at least
        assert 0 < gc.get_freeze_count() <= heap.frozen  # frozen objects freed by refcount leave it
        r = client.post(
            "/search", json={"query": "vitamin d and bone density"}, headers={"X-API-Key": "test-key"}
        )
        assert r.status_code == 200 and r.json()["results"][0]["hits"]
    assert gc.get_freeze_count() == 0, "the process's collector was not given back as it was"


def test_a_swap_unfreezes_so_the_old_bundles_cycles_are_freed_then_freezes_again(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    settings = make_settings(bundles, gc_freeze_settle_s=1.0, reload_poll_seconds=0.05)
    with TestClient(create_app(settings)) as client:
        hot_swap, heap = client.app.state.hot_swap, client.app.state.collections.heap
        assert hot_swap.live.version == a
        marker = _Marker()
        marker.bundle = hot_swap.live
        hot_swap.live.marker = marker  # a cycle through the live bundle: garbage once the bundle is dropped
        gone = weakref.ref(marker)
        del marker
        heap.freeze_now()  # the cycle is frozen with everything else, as at start-up
        assert gc.get_freeze_count() > 0 and gone() is not None
        b = publish(staged["B"], bundles)  # CURRENT moves; the poller swaps b in
        wait_until(lambda: hot_swap.live.version == b, what="b live")
        assert gc.get_freeze_count() == 0, "a swap must make the old bundle collectable at once"
        wait_until(lambda: gc.get_freeze_count() > 0, timeout=10, what="frozen again after the settle time")
        assert gone() is None, "the old bundle's cycle was frozen again instead of freed"
        assert 0 < gc.get_freeze_count() <= heap.frozen
    assert gc.get_freeze_count() == 0


def test_a_settle_time_of_zero_never_freezes(tmp_path, staged):
    bundles = tmp_path / "bundles"
    publish(staged["A"], bundles)
    with TestClient(create_app(make_settings(bundles, gc_freeze_settle_s=0))) as client:
        assert client.app.state.collections.heap.frozen == 0
        assert gc.get_freeze_count() == 0
