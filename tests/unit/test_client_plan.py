"""Property tests of the client's pure plan (client/plan.py, DESIGN §5.3, §7.1): which
copies a message makes, which take the direct lane, and when a client holds back. The
real client and the simulated clients both drive these functions, so their rules are
tested once, here, over random statuses and clocks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.protocols import routed_by_id
from client.plan import (
    DIRECT_BEHIND_S,
    DirectLane,
    NodeView,
    copies,
    lagging,
    lane_targets,
)

TOPICS = ("A", "B", "C", "D")

views_of_a_topic = st.lists(
    st.builds(
        NodeView,
        topic=st.just("?"),
        live=st.booleans(),
        control_log=st.booleans(),
        behind_s=st.floats(min_value=0.0, max_value=2.0, allow_nan=False),
        since_s=st.floats(min_value=-0.5, max_value=2.0, allow_nan=False),
    ),
    min_size=0,
    max_size=3,
)
views = st.dictionaries(st.sampled_from(TOPICS), views_of_a_topic)
targets = st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True)
times = st.lists(st.floats(min_value=0.0, max_value=0.05, allow_nan=False), max_size=60)


@given(targets, views)
def test_a_lane_opens_only_where_every_node_is_live_reads_a_control_log_and_keeps_up(
    chosen: list[str], seen: dict[str, list[NodeView]]
) -> None:
    lanes = lane_targets(chosen, seen)
    assert lanes <= set(chosen)
    for topic in chosen:
        nodes = seen.get(topic, [])
        fit = bool(nodes) and all(
            n.live and n.control_log and n.behind_s <= DIRECT_BEHIND_S for n in nodes
        )
        assert (topic in lanes) == fit, (topic, nodes)


@given(targets, views, st.floats(min_value=0.0, max_value=1.0, allow_nan=False))
def test_a_client_holds_back_exactly_while_a_live_node_is_still_too_far_behind(
    chosen: list[str], seen: dict[str, list[NodeView]], max_lag_s: float
) -> None:
    verdict = lagging(chosen, seen, max_lag_s)
    too_far = [
        (t, n.behind_s - max(0.0, n.since_s))
        for t in chosen
        for n in seen.get(t, [])
        if n.live and n.behind_s - max(0.0, n.since_s) > max_lag_s
    ]
    assert verdict == (too_far[0] if too_far else None)


@given(
    st.text(min_size=1, max_size=8),
    targets,
    st.booleans(),
    st.sets(st.sampled_from(TOPICS)),
    st.booleans(),
)
def test_every_message_has_one_copy_per_target_and_lane_copies_only_where_a_lane_is_open(
    message_id: str, chosen: list[str], by_id: bool, lanes: set[str], lane_open: bool
) -> None:
    lane = DirectLane() if lane_open else DirectLane(rate=0.0, burst=0)
    made = copies(message_id, chosen, by_id, lanes, lane, now=0.0)
    expected = [routed_by_id(chosen, message_id)] if by_id else chosen
    assert [c.topic for c in made] == expected
    for copy in made:
        if copy.direct:
            assert lane_open and copy.topic in lanes


@given(
    st.floats(min_value=0.0, max_value=5_000.0, allow_nan=False),
    st.integers(min_value=0, max_value=50),
    times,
)
def test_the_bucket_never_gives_more_than_its_burst_and_its_rate_since(
    rate: float, burst: int, gaps: list[float]
) -> None:
    lane = DirectLane(rate=rate, burst=burst)
    now, taken = 0.0, 0
    for gap in gaps:
        now += gap
        taken += lane.take("A", now)
        assert taken <= burst + rate * now + 1e-6, (taken, now)


@given(st.integers(min_value=1, max_value=50), st.floats(min_value=1.0, max_value=100.0))
def test_an_idle_bucket_refills_to_its_burst_and_no_further(burst: int, rate: float) -> None:
    lane = DirectLane(rate=rate, burst=burst)
    given_at_once = sum(lane.take("A", 0.0) for _ in range(burst + 5))
    assert given_at_once == burst
    later = burst / rate + 1_000.0  # long enough to refill many times over
    assert sum(lane.take("A", later) for _ in range(burst + 5)) == burst


def test_a_closed_lane_takes_no_copy_again() -> None:
    lane = DirectLane()
    assert lane.take("A", 0.0)
    lane.close()
    assert not lane.open
    made = copies("m", ["A", "B"], False, {"A", "B"}, lane, now=10.0)
    assert [c.direct for c in made] == [False, False]
