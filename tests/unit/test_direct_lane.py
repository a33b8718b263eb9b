"""The client's direct lane (docs/DESIGN.md §7.1): to a destination whose nodes read a
control log and are not behind, a trickle of copies goes straight to the control log;
the rest, a flood, and everything to other nodes go to the input log. (No broker: the
statuses are a stand-in and the producer records what it is given.)"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from atomickafka.client.delivery import SentMessage
from atomickafka.client.errors import DeliveryError
from atomickafka.client.plan import DEFAULT_DIRECT_BURST, DIRECT_BEHIND_S, DirectLane
from atomickafka.core.signing import Signer, parse_secrets
from tests.unit.test_client_statuses import SECRET, Watch, client, status


class Recorder:
    """A producer that keeps ``(topic, value, key, headers)`` of every record, and its
    delivery report callback (``reports``), to be called as the broker would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, Any, Any]] = []
        self.reports: list[Any] = []

    def send(self, topic: str, payload: bytes, **kwargs: Any) -> None:
        self.sent.append((topic, payload, kwargs.get("key"), kwargs.get("headers")))
        self.reports.append(kwargs.get("on_delivery"))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


class Written:
    """The record a delivery report names (its topic is all the lane looks at)."""

    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic


def sending(watch: Watch, **options: Any) -> tuple[Any, Recorder]:
    made = client(watch, **options)
    recorder = Recorder()
    made._producer = recorder  # type: ignore[assignment]
    return made, recorder


def topics_written(recorder: Recorder) -> list[str]:
    return [sent[0] for sent in recorder.sent]


def test_the_bucket_gives_a_burst_then_its_rate() -> None:
    lane = DirectLane(rate=100.0, burst=3)
    assert [lane.take("in.A", 10.0) for _ in range(4)] == [True, True, True, False]
    assert lane.take("in.B", 10.0)  # a bucket per destination
    assert not lane.take("in.A", 10.005)  # half a token
    assert lane.take("in.A", 10.011)  # one token after 10 ms at 100 a second
    assert [lane.take("in.A", 60.0) for _ in range(4)] == [True, True, True, False]  # capped
    assert not DirectLane(rate=0.0).open and DirectLane().open
    with pytest.raises(ValueError, match=">= 0"):
        DirectLane(rate=-1.0)


def test_a_trickle_takes_the_lane_and_a_flood_the_input_log() -> None:
    judge, recorder = sending(Watch([status("A", 1, control_log=True)]))
    judge.send_batch(range(DEFAULT_DIRECT_BURST + 50), ["A"])
    written = topics_written(recorder)
    assert written[:DEFAULT_DIRECT_BURST] == ["atomickafka-ctl.A"] * DEFAULT_DIRECT_BURST
    assert written[DEFAULT_DIRECT_BURST:] == ["atomickafka-in.A"] * 50
    assert judge.direct_copies == DEFAULT_DIRECT_BURST


def test_no_lane_to_a_node_without_a_control_log_or_behind_or_when_turned_off() -> None:
    behind = status("A", 1, control_log=True, input_lag=9_000, input_drain_s=DIRECT_BEHIND_S * 2)
    for watch, options in [
        (Watch([status("A", 1)]), {}),
        (Watch([behind]), {}),
        (Watch([status("A", 1, control_log=True)]), {"direct_rate": 0.0}),
    ]:
        judge, recorder = sending(watch, **options)
        judge.send("v", ["A"])
        assert topics_written(recorder) == ["atomickafka-in.A"]
        assert judge.direct_copies == 0


def test_a_multicast_takes_the_lane_only_where_the_node_allows_it() -> None:
    watch = Watch([status("A", 1, control_log=True), status("B", 1)])
    judge, recorder = sending(watch)
    judge.send("v", ["A", "B"])
    assert sorted(topics_written(recorder)) == ["atomickafka-ctl.A", "atomickafka-in.B"]


def test_a_direct_copy_is_signed_for_the_log_it_is_written_to() -> None:
    signing = status("A", 1, control_log=True, signing_keys=Signer(parse_secrets(SECRET)).key_ids())
    judge, recorder = sending(Watch([signing]), secret=SECRET)
    judge.send("v", ["A"])
    [(topic, value, key, headers)] = recorder.sent
    assert topic == "atomickafka-ctl.A"
    signer = Signer(parse_secrets(SECRET))
    assert signer.problem(topic, key, value, headers) is None  # as the node checks it
    assert signer.problem("atomickafka-in.A", key, value, headers) is not None


def test_a_copy_the_control_log_refuses_goes_to_the_input_log_and_the_lane_closes() -> None:
    """A deployment whose ACLs predate control logs gives clients no Write on
    ``atomickafka-ctl.*``: the refused copy (nothing was written) is written again to
    its input log, signed for it, and the message is reported delivered once."""
    signing = status("A", 1, control_log=True, signing_keys=Signer(parse_secrets(SECRET)).key_ids())
    judge, recorder = sending(Watch([signing]), secret=SECRET)
    reported: list[tuple[KafkaError | None, SentMessage]] = []
    judge.send("v", ["A"], on_delivery=lambda err, sent: reported.append((err, sent)))
    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    recorder.reports[0](refused, Written("atomickafka-ctl.A"))
    assert reported == [] and judge.lane_refused is not None
    assert "atomickafka-ctl.A" in judge.lane_refused and judge.direct_copies == 0
    judge.flush()  # writes the refused copy again, to the input log
    assert topics_written(recorder) == ["atomickafka-ctl.A", "atomickafka-in.A"]
    (_, value, key, headers) = recorder.sent[1]
    assert Signer(parse_secrets(SECRET)).problem("atomickafka-in.A", key, value, headers) is None
    recorder.reports[1](None, Written("atomickafka-in.A"))
    assert [err for err, _ in reported] == [None]
    judge.send_batch(range(5), ["A"])  # the lane is closed for good
    assert topics_written(recorder)[2:] == ["atomickafka-in.A"] * 5


def test_a_lane_copy_that_fails_otherwise_is_a_failed_message() -> None:
    judge, recorder = sending(Watch([status("A", 1, control_log=True)]))
    reported: list[KafkaError | None] = []
    judge.send("v", ["A"], on_delivery=lambda err, _sent: reported.append(err))
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    recorder.reports[0](timed_out, Written("atomickafka-ctl.A"))
    assert reported == [timed_out] and judge.lane_refused is None
    with pytest.raises(DeliveryError):
        judge.flush()
