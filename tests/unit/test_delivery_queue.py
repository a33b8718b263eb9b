"""The engine's delivery queue (core/delivery_queue.py) does what the SortedList it
replaced did, for every sequence of the operations the engine uses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedList

from atomickafka.core.delivery_queue import DeliveryQueue, QueueKey

KEYS = st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", "c"]))
#: ("add", key), ("remove", index of a held key), ("pop", None), ("slice", stop)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), KEYS),
        st.tuples(st.just("remove"), st.integers(0, 50)),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("slice"), st.integers(0, 5)),
    ),
    max_size=80,
)


@given(OPERATIONS)
def test_the_queue_is_the_sorted_list_it_replaced(operations: list[tuple[str, object]]) -> None:
    queue = DeliveryQueue()
    model: SortedList = SortedList()
    for kind, arg in operations:
        if kind == "add":
            assert isinstance(arg, tuple)
            key: QueueKey = (int(arg[0]), str(arg[1]))
            queue.add(key)
            model.add(key)
        elif kind == "remove" and model:
            assert isinstance(arg, int)
            held = model[arg % len(model)]
            queue.remove(held)
            model.remove(held)
        elif kind == "pop" and model:
            assert queue.pop(0) == model.pop(0)
        elif kind == "slice":
            assert isinstance(arg, int)
            assert list(queue.islice(0, arg)) == list(model.islice(0, arg))
        assert len(queue) == len(model)
        assert bool(queue) == bool(model)
        if model:
            assert queue[0] == model[0]
    assert list(queue.islice(0, None)) == list(model)


def test_what_it_does_not_hold_raises_as_the_sorted_list_did() -> None:
    queue = DeliveryQueue()
    with pytest.raises(IndexError):
        queue[0]
    with pytest.raises(IndexError):
        queue.pop(0)
    queue.add((1, "a"))
    with pytest.raises(ValueError, match="not in the queue"):
        queue.remove((2, "a"))
    queue.remove((1, "a"))
    with pytest.raises(ValueError, match="not in the queue"):
        queue.remove((1, "a"))
    assert len(queue) == 0
