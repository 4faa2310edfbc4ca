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
