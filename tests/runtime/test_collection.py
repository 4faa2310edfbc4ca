"""runtime.collection: automatic collection off while executors are open, restored after."""

from __future__ import annotations

import gc

import pytest

from flexflow.runtime.collection import CollectionHold


@pytest.fixture
def collection_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_held_collection_is_off_until_the_last_holder_lets_go(collection_on):
    hold = CollectionHold()
    hold.hold()
    hold.hold()
    assert not gc.isenabled() and hold.wanted
    hold.release()
    assert not gc.isenabled()
    hold.release()
    assert gc.isenabled()
    hold.release()  # one release too many changes nothing
    assert gc.isenabled()


def test_a_user_who_turned_collection_off_keeps_it_off(collection_on):
    gc.disable()
    hold = CollectionHold()
    hold.hold()
    assert not hold.wanted
    hold.release()
    assert not gc.isenabled()


def test_the_program_collects_what_is_due_while_automatic_collection_is_off(collection_on):
    from flexflow.runtime import collection

    hold = collection.COLLECTION
    hold.hold()
    try:
        # cycles, freed only by a collection; 200 more than the threshold, since the first
        # (up to 80) may reuse lists freed earlier, which the young generation's count misses
        for _ in range(gc.get_threshold()[0] + 200):
            cycle = []
            cycle.append(cycle)
        assert gc.get_count()[0] > gc.get_threshold()[0]  # automatic collection is off
        collection.collect_due()
        assert gc.get_count()[0] < gc.get_threshold()[0]
    finally:
        hold.release()
