"""The Kafka shell around one topic's :class:`~atomickafka.core.merger.Merger` (§8).

It reads every partition of ``atomickafka-layers.T`` (partition ``p``: layer ``p``'s
decided messages, as ``PartitionDeliveryMessage`` records, and its watermarks), feeds
them to the merger and writes what the merger releases to ``T`` as ordinary Delivery
records, in merged order; a :class:`~atomickafka.core.merger.TickRequest` becomes a
``TickMessage`` in partition ``p`` of ``T``'s input log, which moves the idle layer's
clock.

Recovery needs no committed offsets: the merged order is strictly increasing in
``(timeStamp, layer, messageID)``, so at start the shell reads the last Delivery
already in ``T``, tells the merger to release nothing at or below it, and replays the
layer streams from the beginning. The producer is idempotent and gapless (an error
that could leave a gap in ``T`` is fatal and the merger restarts), so ``T`` always ends
with a prefix of the merged order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Final

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.core.merger import (
    LayerDelivery,
    LayerRecord,
    LayerWatermark,
    MergeKey,
    Merger,
    Release,
    TickRequest,
)
from atomickafka.core.reader import DEAD_LETTER_ERROR_HEADER, delivery_order_key, read_delivery
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    decode_record,
    encode_delivery,
    encode_tick,
)
from atomickafka.errors import ConfigError
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.consumer import (
    consume_batch,
    last_record,
    make_consumer,
    retry_transient,
    usable,
)
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.status import LayerState, Role, Status, WaitingHead, publish_status
from atomickafka.kafka.topics import (
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
    merger_key,
)
from atomickafka.node.config import NodeConfig
from atomickafka.node.lifecycle import Stoppable
from atomickafka.node.metrics import Rates, status_of
from atomickafka.node.runtime import NodeStartError, node_topic_specs

__all__ = ["MergerRuntime"]

log = logging.getLogger("atomickafka.merger")

#: The merged stream is one partition: one total order for plain consumers.
_DELIVERY_PARTITION: Final = 0


class MergerRuntime(Stoppable):
    """Runs the merger of one partitioned topic until :meth:`stop` is called."""

    def __init__(self, config: NodeConfig) -> None:
        if not config.layered:
            raise ConfigError("a merger serves a partitioned topic (partitions > 1)")
        super().__init__()
        self.config = config
        self.merger = Merger(config.topic, config.partitions)
        self.key = merger_key(config.topic)
        self.sender_id = f"merger-{config.topic}"
        self.dead_letters = 0
        self._producer: RecordProducer | None = None
        self._consumer: Consumer | None = None
        self._replay_ends: dict[int, int] = {}
        self._failure: str | None = None
        self._released = 0
        self.rates = Rates(1)  # deliveries per second

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the merger; return an exit status (0 after a clean stop)."""
        cfg = self.config
        if cfg.create_topics:
            ensure_topics(admin_client(cfg.bootstrap, cfg.overrides), node_topic_specs(cfg))
        # Gapless: the delivery stream must always end with a prefix of the merged order.
        self._producer = RecordProducer(
            cfg.bootstrap,
            cfg.overrides,
            **{"enable.gapless.guarantee": True, "message.timeout.ms": 0},
        )
        self._consumer = make_consumer(cfg.bootstrap, None, cfg.overrides)
        try:
            self._start()
            return self._loop(max_seconds)
        finally:
            self._shutdown()

    def _start(self) -> None:
        assert self._consumer is not None
        consumer, cfg = self._consumer, self.config
        target = delivery_topic(cfg.topic)
        last = retry_transient(lambda: last_record(consumer, target), "last delivery")
        if last is not None:
            written = read_delivery(last, at=cfg.topic)
            if written is None:
                raise NodeStartError(
                    f"the last record of {target} (offset {last.offset()}) is not a Delivery "
                    f"of {cfg.topic}, so the merger cannot tell where the merged stream ends; "
                    f"only the merger writes to {target}"
                )
            resume = MergeKey(*delivery_order_key(written))
            self.merger.resume_after(resume)
            log.info("merger %s resumes after %s", cfg.topic, resume)
        source = layers_topic(cfg.topic)
        for layer in range(cfg.partitions):
            _, high = retry_transient(
                lambda layer=layer: consumer.get_watermark_offsets(  # type: ignore[misc]
                    TopicPartition(source, layer), timeout=10
                ),
                "watermarks",
            )
            if high > 0:  # still to replay
                self._replay_ends[layer] = high
        consumer.assign(
            [TopicPartition(source, p, OFFSET_BEGINNING) for p in range(cfg.partitions)]
        )

    def _loop(self, max_seconds: float | None) -> int:
        assert self._consumer is not None and self._producer is not None
        cfg = self.config
        self._start_clock(cfg.status_interval_s, max_seconds)
        while not self.stopping:
            records = usable(consume_batch(self._consumer, cfg.batch_size, cfg.poll_timeout_s))
            if records:
                self._process(records)
            self._producer.poll(0)
            if self._failure is not None:
                log.error(
                    "merger %s: %s; exiting so that a restart resumes", cfg.topic, self._failure
                )
                return 1
            if self._tick(time.monotonic()):
                break
        return 0

    def _shutdown(self) -> None:
        if self._producer is not None and self._producer.flush(30):
            log.error("merger %s: outputs not acknowledged at shutdown", self.config.topic)
        if self._consumer is not None:
            self._consumer.close()

    # ------------------------------------------------------------------ the batch

    def _process(self, records: list[KafkaMessage]) -> None:
        items: list[LayerRecord] = []
        for record in records:
            item = self._layer_record(record)
            if item is not None:
                items.append(item)
            offset, part = record.offset(), record.partition()
            if (
                part is not None
                and offset is not None
                and offset + 1 >= self._replay_ends.get(part, 0)
            ):
                self._replay_ends.pop(part, None)
        outputs = self.merger.handle_batch(items)
        for rejected in self.merger.rejected:
            self._set_aside(
                orjson.dumps(repr(rejected.record)), f"merger refused: {rejected.reason}"
            )
        assert self._producer is not None
        cfg = self.config
        for output in outputs:
            if isinstance(output, Release):
                message = output.payload
                assert isinstance(message, Message)
                delivery = message._replace(
                    messageType=MessageType.DELIVERY, senderID=self.sender_id
                )
                self._producer.send(
                    delivery_topic(cfg.topic),
                    encode_delivery(delivery),
                    partition=_DELIVERY_PARTITION,
                    on_delivery=self._on_delivery,
                )
                self._released += 1
            elif isinstance(output, TickRequest):  # also during a replay: ticks are idempotent
                self._producer.send(
                    input_topic(cfg.topic, cfg.layout),
                    encode_tick(self.sender_id, output.timeStamp, output.layer),
                    partition=output.layer,
                    on_delivery=self._on_delivery,
                )

    def _layer_record(self, record: KafkaMessage) -> LayerRecord | None:
        raw = record.value()
        try:
            if raw is None:
                raise MessageError(None, "record has no value")
            (message,) = decode_record(raw)
        except (MessageError, ValueError) as exc:
            self._set_aside(raw, f"not a layer record: {exc}")
            return None
        layer = record.partition() or 0
        if message.partitionID is not None and message.partitionID != layer:
            self._set_aside(raw, f"a record of layer {message.partitionID} in partition {layer}")
            return None
        assert message.timeStamp is not None or message.messageType is MessageType.WATERMARK
        if message.messageType is MessageType.WATERMARK:
            return LayerWatermark(layer, message.timeStamp or 0)
        if message.messageType is MessageType.PARTITION_DELIVERY:
            return LayerDelivery(layer, message.timeStamp or 0, message.messageID, message)
        self._set_aside(raw, f"{message.messageType.value} is not a layer record")
        return None

    def _on_delivery(self, err: KafkaError | None, _msg: KafkaMessage) -> None:
        if err is not None and self._failure is None:
            self._failure = f"a write failed: {err}"

    def _set_aside(self, value: bytes | None, reason: str) -> None:
        assert self._producer is not None
        self.dead_letters += 1
        log.warning("merger %s set a record aside: %s", self.config.topic, reason)
        self._producer.send(
            dead_letter_topic(self.config.topic),
            value,
            headers=[(DEAD_LETTER_ERROR_HEADER, reason.encode())],
        )

    # ------------------------------------------------------------------ status

    def measure(self, now: float) -> None:
        """Take the delivery rate over the interval since the last measure (the status
        publisher does this once per status interval)."""
        self.rates.take((self._released,), now)

    def status(self) -> Status:
        """Pending items, each layer's watermark and what the head waits for; reading it
        changes nothing."""
        merger, cfg = self.merger, self.config
        head = merger.head
        blocked = merger.blocked_by()
        marks = merger.watermarks
        return replace(
            status_of(cfg, Role.MERGER, self.key, self.sender_id),
            pending=merger.pending_count,
            oldest_pending_id=None if head is None else head.messageID,
            watermark=min(marks),
            records_in=merger.stats.records_in,
            records_out=self._released,
            deliveries=self._released,
            deliveries_per_s=self.rates.last[0],
            dead_letters=self.dead_letters,
            rejected=merger.stats.rejected,
            replaying=bool(self._replay_ends),
            layers=tuple(
                LayerState(layer, mark, layer in blocked) for layer, mark in enumerate(marks)
            ),
            waiting=()
            if head is None
            else (
                WaitingHead(
                    head.messageID,
                    head.timeStamp,
                    decided=True,
                    waiting_for=tuple(f"layer {layer}" for layer in blocked),
                ),
            ),
        )

    def _publish_status(self, now: float) -> None:
        assert self._producer is not None
        self.measure(now)
        publish_status(self._producer, self.status())
