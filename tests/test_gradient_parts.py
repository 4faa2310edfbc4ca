"""Gradient parts: no two arguments that Legate would serialize, or lose one of, share a part."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.gradient_parts import _overlap, assign_parts, plan_parts

WHOLE = ((0, 8), (0, 4), (0, 8))
FIRST, SECOND = ((0, 8), (0, 2), (0, 8)), ((0, 8), (2, 4), (0, 8))
TOP, BOTTOM = ((0, 4), (0, 4), (0, 8)), ((4, 8), (0, 4), (0, 8))


def test_sample_splits_keep_one_part():
    """Data parallelism: each device adds into its own rows; nothing changes."""
    units = [(((1, 0), 0, TOP),), (((1, 1), 1, BOTTOM),), (((2, 0), 0, TOP),)]
    assert assign_parts(units) == (0, 0, 0)
    assert plan_parts({7: units}).counts == {}


def test_overlapping_writers_on_two_devices_get_two_parts():
    """An output-channel split: each device's task adds into the whole input's gradient."""
    units = [(((3, 0), 0, WHOLE),), (((3, 1), 1, WHOLE),)]
    parts = plan_parts({5: units})
    assert parts.counts == {5: 2}
    assert parts.part_of(5, (3, 0), WHOLE) == 0 and parts.part_of(5, (3, 1), WHOLE) == 1
    assert parts.parts_read(5, [WHOLE]) == (0, 1)


def test_one_device_shares_a_part():
    """Tasks on one device run one at a time anyway."""
    units = [(((3, 0), 0, WHOLE),), (((4, 0), 0, WHOLE),)]
    assert assign_parts(units) == (0, 0)


def test_two_overlapping_arguments_of_one_task_get_two_parts():
    """Attention split by sequence: a task adds its query rows' and the whole keys' gradients
    into one tensor; Legate lost one of two such reductions of one task."""
    units = [
        (((4, 0), 0, FIRST),),
        (((4, 0), 0, WHOLE),),
        (((4, 1), 1, SECOND),),
        (((4, 1), 1, WHOLE),),
    ]
    assert assign_parts(units) == (0, 1, 0, 2)
    parts = plan_parts({6: units})
    assert parts.part_of(6, (4, 0), FIRST) == 0 and parts.part_of(6, (4, 0), WHOLE) == 1
    assert parts.parts_read(6, [FIRST]) == (0, 1, 2)


def test_readers_skip_parts_nobody_writes_over_their_region():
    units = [(((1, 0), 0, TOP),), (((2, 1), 1, TOP),)]
    parts = plan_parts({3: units})
    assert parts.parts_read(3, [TOP]) == (0, 1)
    assert parts.parts_read(3, [BOTTOM]) == (0,)  # the first part is always read (zeros)


def test_a_concurrent_launch_stays_in_one_part():
    """A concurrent launch's points name one tiling of one store: one unit, one part."""
    launch = (((2, 0), 0, TOP), ((2, 1), 1, BOTTOM))
    other = (((5, 0), 1, TOP),)
    assert assign_parts([other, launch]) == (0, 1)


intervals = st.tuples(st.integers(0, 3), st.integers(1, 4)).map(
    lambda t: (min(t[0], t[1] - 1), max(t[1], t[0] + 1))
)
writers = st.lists(
    st.tuples(
        st.tuples(st.integers(0, 3), st.integers(0, 2)),
        st.integers(0, 2),
        st.tuples(intervals, intervals),
    ),  # fmt: skip
    min_size=1,
    max_size=12,
    unique_by=lambda w: (w[0], w[2]),
)


@settings(max_examples=200, deadline=None)
@given(writers)
def test_no_part_holds_two_conflicting_writers(found):
    chosen = assign_parts([(w,) for w in found])
    for i, (task_a, device_a, region_a) in enumerate(found):
        for j in range(i + 1, len(found)):
            task_b, device_b, region_b = found[j]
            if chosen[i] == chosen[j] and _overlap(region_a, region_b):
                assert device_a == device_b and task_a != task_b
    # parts are numbered densely from 0, and each writer can be found again
    assert set(chosen) == set(range(max(chosen) + 1))
    parts = plan_parts({0: [(w,) for w in found]})
    for (task, _, region), part in zip(found, chosen, strict=True):
        assert parts.part_of(0, task, region) == part
        assert part in parts.parts_read(0, [region])
