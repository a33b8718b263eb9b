"""The filtering client: publish to several topics, read ordered deliveries.

>>> from atomickafka.client import AtomicKafkaClient          # doctest: +SKIP
>>> with AtomicKafkaClient("127.0.0.1:19092") as ak:
...     mid = ak.send({"order": 42}, ["payments", "audit"])
...     mids = ak.send_batch([{"order": 43}, {"order": 44}], ["payments", "audit"])
...     ak.flush()
...     with ak.reader("audit") as reader:
...         for d in reader.deliveries(timeout_s=5):
...             print(d.messageID, d.value)
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, Literal, NamedTuple, cast

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as KafkaMessage

from atomickafka.client.delivery import Delivery, OnDelivery, SentMessage
from atomickafka.client.errors import (
    ConfigError,
    DeliveryError,
    DestinationError,
    MessageError,
    OfflineDestinationError,
    QueueFullError,
    SigningError,
)
from atomickafka.client.plan import (
    DEFAULT_DIRECT_RATE,
    DEFAULT_MAX_LAG_S,
    PACE_TARGET_SHARE,
    DirectLane,
    NodeView,
    Pace,
    copies,
    lagging,
    lane_targets,
    worst_behind,
)
from atomickafka.client.reader import DeliveryReader
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.protocols import route
from atomickafka.core.raw import RESERVED_HEADER_PREFIX, ClientRecords, Header
from atomickafka.core.signing import Signer
from atomickafka.core.wire import MAX_VALUE_BYTES, is_valid_topic_name, parse_destinations
from atomickafka.kafka.connection import Connection, connection_of
from atomickafka.kafka.guarantees import refuse_unsafe
from atomickafka.kafka.producer import (
    CLOSE_ON_ERROR_TIMEOUT_S,
    CLOSE_TIMEOUT_S,
    DeliveryCallback,
    RecordHeaders,
    RecordProducer,
)
from atomickafka.kafka.secrets import signer_from
from atomickafka.kafka.status import STATUS_READ_WINDOW_S, Role, Status, StatusWatch
from atomickafka.kafka.topics import Layout, control_topic, input_topic

__all__ = ["AtomicKafkaClient", "client_id_is_valid"]

log = logging.getLogger("atomickafka.client")

#: How often send() reads what the nodes published to the status topic since (a
#: non-blocking read of what the consumer fetched): a lagging node publishes every
#: quarter second, so holding back starts, and ends, in time to keep the backlog near
#: ``max_lag_s`` under a flood.
_REFRESH_S = 0.25
#: How long send() waits for a lagging destination before it raises QueueFullError.
DEFAULT_MAX_BLOCK_S = 30.0
_LAG_POLL_S = 0.25  # how often a held-back send() reads the statuses again
#: A paced send() sleeps once it owes this long (s); less is carried to the next send.
_PACE_SLEEP_S: Final = 0.002
#: How long the first read of the status topic may wait for it to answer: a broker
#: failover leaves its partition without a leader for about 10 s (the brokers' session).
_STATUS_TIMEOUT_S = 30.0
#: How long librdkafka tries to write a record: under the nodes' lateness bound (half
#: the default 60 s memory window, docs/DESIGN.md §4.13).
CLIENT_TIMEOUT_MS: Final = 25_000
#: How long ``send`` waits, by default, for a destination whose node's status is late
#: (:data:`~atomickafka.kafka.status.FAILOVER_GRACE_S`) or for a status topic that cannot
#: be read, before it refuses the destination (docs/DESIGN.md §5.3).
FAILOVER_WAIT_S: Final = 30.0


#: How often ``send`` serves delivery reports (seconds): librdkafka queues them, and
#: ``flush``, ``close`` and a full queue serve them too; a poll after every send was a
#: call into librdkafka per message (paced, a third of the time inside ``send``:
#: docs/performance.md).
_POLL_EVERY_S: Final = 0.005


#: The user's headers, as :meth:`AtomicKafkaClient.send` takes them.
UserHeaders = Mapping[str, str | bytes] | Sequence[tuple[str, str | bytes]]
#: A message of a batch, encoded: its id, value, layer, and its record's value and headers.
_Encoded = tuple[str, Any, int | None, bytes, list[Header]]


class _Route(NamedTuple):
    """Where the messages to one destination set, written via one topic, go."""

    algorithm: Algorithm  # the protocol the destinations' nodes run
    partitions: int  # the layers the destinations share (1: unpartitioned)
    targets: tuple[str, ...]  # the topics whose logs the record is written to
    by_id: bool  # poc/optimized without via: one of ``targets``, chosen by the id
    lagging: bool  # a destination's node lagged more than max_lag_s when judged
    #: the targets whose copies may take the direct lane (their control logs, §7.1)
    lanes: frozenset[str]


def _one_id_each(values: Iterable[Any], message_ids: Sequence[str]) -> list[Any]:
    """``values`` as a list, when ``message_ids`` names one id for each of them
    (:meth:`AtomicKafkaClient.send_batch`); else :class:`MessageError`."""
    values = list(values)
    if len(message_ids) != len(values):
        reason = f"{len(message_ids)} ids for {len(values)} values"
        raise MessageError("message_ids", reason, list(message_ids)[:3])
    return values


class _Pending:
    """Counts the records of one sent message until all are acknowledged."""

    __slots__ = ("callback", "error", "failed", "left", "sent")

    def __init__(
        self,
        sent: SentMessage,
        failed: Callable[[str, KafkaError], None],
        callback: OnDelivery | None,
    ) -> None:
        self.sent, self.failed, self.callback = sent, failed, callback
        self.left = sent.records
        self.error: KafkaError | None = None

    def on_delivery(self, err: KafkaError | None, _record: KafkaMessage) -> None:
        self.left -= 1
        if err is not None and self.error is None:
            self.error = err
            self.failed(self.sent.messageID, err)
        if self.left == 0 and self.callback is not None:
            self.callback(self.error, self.sent)


class _LaneCopy:
    """A copy sent by the direct lane, kept until its delivery report. Refused for want
    of Write on the control log (the ACLs of a deployment set up before control logs),
    it is handed back to the client, which writes it to its input log instead: nothing
    was written, so nothing is written twice."""

    __slots__ = ("client", "headers", "input_log", "key", "layer", "payload", "report")

    def __init__(
        self,
        client: AtomicKafkaClient,
        input_log: str,
        payload: bytes,
        key: bytes | None,
        layer: int | None,
        headers: Sequence[tuple[str, bytes]],
        report: DeliveryCallback,
    ) -> None:
        self.client, self.input_log, self.payload = client, input_log, payload
        self.key, self.layer, self.headers, self.report = key, layer, headers, report

    def on_delivery(self, err: KafkaError | None, record: KafkaMessage) -> None:
        if err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            self.client._lane_refused(self, record.topic() or "", err)
        else:
            self.report(err, record)


class AtomicKafkaClient(AbstractContextManager["AtomicKafkaClient"]):
    """Send atomic-multicast messages and read a topic's ordered deliveries.

    ``bootstrap_servers`` is where the brokers are, or a
    :class:`~atomickafka.kafka.connection.Connection` (which holds the librdkafka
    settings too). ``layout`` must match the nodes' ``--layout``. ``config`` holds
    librdkafka settings (``-X``; ``producer.``/``consumer.`` prefixes address one kind
    of client; added to the connection's) applied to
    the Kafka clients this object creates; settings that would break the guarantees
    (idempotence off, ``acks`` below all, ``isolation.level=read_uncommitted``) raise
    :class:`~atomickafka.client.ConfigError`. Before sending to a
    topic the client checks, in the status topic, that a node serves it and which
    protocol it runs (``direct``: the message is written to every destination's input
    log; otherwise to one). ``allow_offline`` sends anyway to topics without a live node
    (their other destinations then wait until one starts), with ``algorithm`` (default
    :data:`~atomickafka.core.engine.DEFAULT_ALGORITHM`) when no node says which.

    To a destination whose nodes have control logs (``--control-log``, the default) and
    are not behind, up to ``direct_rate`` copies a second are written straight to the
    control log (the *direct lane*, docs/DESIGN.md §7.1: one round trip less than the
    input log's marker); the rest, and all of a flood, go to the input log, where they
    do not stand in front of the nodes' proposals. ``direct_rate=0`` never takes the
    lane. ``direct_copies`` counts the copies that took it.

    ``idempotent=False`` writes without Kafka's idempotent producer, whose start-up
    waits up to half a second for a producer id: for one-shot sends (``atomickafka send
    VALUE``). A record the producer retries may then be written twice, which the nodes
    drop (the messageID is the same), and two messages of this client may be written
    out of order, so keep the default when sending several.

    Use it as a context manager: leaving the block normally waits until every sent
    message is acknowledged (or raises :class:`~atomickafka.client.DeliveryError`);
    leaving it by an exception waits briefly, logs what was not written and lets the
    exception go on.
    """

    def __init__(
        self,
        bootstrap_servers: str | Connection,
        *,
        layout: Layout | str = Layout.SPLIT,
        client_id: str | None = None,
        config: Mapping[str, str] | None = None,
        algorithm: Algorithm | str | None = None,
        allow_offline: bool = False,
        max_value_bytes: int = MAX_VALUE_BYTES,
        secret: str | bytes | None = None,
        secret_file: str | None = None,
        idempotent: bool = True,
        failover_wait_s: float = FAILOVER_WAIT_S,
        max_lag_s: float | None = DEFAULT_MAX_LAG_S,
        max_block_s: float = DEFAULT_MAX_BLOCK_S,
        direct_rate: float = DEFAULT_DIRECT_RATE,
    ) -> None:
        #: How this client reaches Kafka: the bootstrap servers and ``config``.
        self.connection = connection_of(bootstrap_servers, config)
        self.bootstrap_servers = self.connection.bootstrap
        self.failover_wait_s = failover_wait_s
        self._set_up_flow(max_lag_s, max_block_s, direct_rate)
        #: Per topic, the time of the late status it was refused on after a wait: the
        #: same status is refused at once, without waiting again.
        self._given_up: dict[str, float] = {}
        self._secret, self._secret_file = secret, secret_file
        self._signer = signer_from(secret, secret_file)
        self.layout = Layout(layout)
        self.client_id = client_id or f"c{uuid.uuid4().hex[:12]}"
        if not client_id_is_valid(self.client_id):
            raise ConfigError(f"client_id must be 1-64 characters of [A-Za-z0-9._-]: {client_id!r}")
        # messageIDs are "<id_prefix>-<n>"; a random part per instance keeps them unique
        # even when a restarted program reuses its client_id (2019 ids collided so).
        self.id_prefix = (
            self.client_id if client_id is None else f"{client_id}-{uuid.uuid4().hex[:8]}"
        )
        self.algorithm = None if algorithm is None else Algorithm(algorithm)
        self.allow_offline = allow_offline
        self.max_value_bytes = max_value_bytes
        self.idempotent = idempotent
        self._failures: list[tuple[str, KafkaError]] = []
        refuse_unsafe(self.connection.settings, node=False)  # ConfigError, before anything
        self._set_up_sending()

    def _set_up_flow(self, max_lag_s: float | None, max_block_s: float, direct_rate: float) -> None:
        """Back-pressure and the direct lane: when sends wait, and which copies go
        straight to a control log."""
        #: Back-pressure (docs/DESIGN.md §5.3): send() waits while a destination's node
        #: lags more than ``max_lag_s`` behind its input (``None``: never), at most
        #: ``max_block_s``, then raises QueueFullError. ``held_back_s``: time waited.
        self.max_lag_s = max_lag_s
        self.max_block_s = max_block_s
        self.held_back_s = 0.0
        #: Pacing (docs/DESIGN.md §5.3): per destination, a rate that follows what its
        #: nodes drain, so that they stay below ``max_lag_s`` without holding back;
        #: ``paced_s``: the part of ``held_back_s`` spent waiting for the pace.
        self._pace = None if max_lag_s is None else Pace(max_lag_s * PACE_TARGET_SHARE)
        self.paced_s = 0.0
        self._lane = DirectLane(direct_rate)
        #: Copies written to a destination's control log (the direct lane).
        self.direct_copies = 0
        #: Why the direct lane closed, if it did: a control log refused a copy (no
        #: Write on ``atomickafka-ctl.*``); from then on every copy goes to an input log.
        self.lane_refused: str | None = None
        self._rerouted: list[_LaneCopy] = []  # refused lane copies to write again

    def _set_up_sending(self) -> None:
        """What sending keeps: the message counter, the producer, the status watch, the
        judged routes and the record builders."""
        self._seq = itertools.count()
        self._producer: RecordProducer | None = None
        self._watch: StatusWatch | None = None
        self._watched_at = 0.0
        self._routes: dict[tuple[tuple[str, ...], str | None], _Judged] = {}
        self._polled_at = 0.0
        #: The record builders of this millisecond, by destinations, key and headers
        #: (:meth:`_records`).
        self._builders: dict[tuple[object, ...], ClientRecords] = {}
        self._records_at = 0

    # ------------------------------------------------------------------ sending

    def send(
        self,
        value: Any,
        destinations: Iterable[str],
        *,
        via: str | None = None,
        key: str | bytes | None = None,
        headers: UserHeaders | None = None,
        on_delivery: OnDelivery | None = None,
    ) -> str:
        """Publish ``value`` to every topic in ``destinations``; return its messageID.

        ``value`` as ``bytes`` is delivered exactly as given (any encoding); anything
        else is a JSON value. ``key`` becomes the Kafka key of every delivery (and on a
        partitioned topic chooses the layer), ``headers`` are delivered unchanged
        (names starting ``atomickafka-`` are reserved).

        Asynchronous: :meth:`flush` waits until the broker has every sent message, and
        ``on_delivery(err, sent)`` (:data:`~atomickafka.client.OnDelivery`) is called
        once the broker has all of this one's records (``err`` is ``None``) or refused
        one. ``via`` writes the message to that topic's input log instead, which relays
        it if it is not a destination. On a partitioned topic ``key`` keeps messages in
        one layer (so they keep their relative order cheaply); without it messages are
        spread round-robin. Raises :class:`~atomickafka.client.MessageError` (a bad
        destination, ``via`` or value) or :class:`~atomickafka.client.DestinationError`
        (:class:`~atomickafka.client.OfflineDestinationError` for a topic without a live
        node) before anything is written; both are ``ValueError``. Many messages to the
        same destinations: :meth:`send_batch`.
        """
        sent = self._publish((value,), destinations, via, key, headers, on_delivery, None)
        return sent[0][0]

    def send_batch(
        self,
        values: Iterable[Any],
        destinations: Iterable[str],
        *,
        via: str | None = None,
        key: str | bytes | None = None,
        headers: UserHeaders | None = None,
        on_delivery: OnDelivery | None = None,
        message_ids: Sequence[str] | None = None,
        sent_at_ms: int | Literal["now"] | None = "now",
    ) -> list[str]:
        """Publish each of ``values`` to every topic in ``destinations``, as :meth:`send`
        would one by one; return their messageIDs, in order.

        One message per value, each with its own messageID, written in order; ``via``,
        ``key``, ``headers`` and ``on_delivery`` (called once per message) as for
        :meth:`send`. What :meth:`send` does per message is done once per batch: the
        destinations and ``via`` are checked, the route judged and a lagging
        destination waited for (back-pressure) once, and the headers every message
        carries are built once. The clock is read once too: **every message of a batch
        has the same send time** (``sentAt``, the ``atomickafka-sent`` header).

        Every value is checked and encoded before anything is written: a value that
        cannot be sent (not JSON, over ``max_value_bytes``) raises
        :class:`~atomickafka.client.MessageError` whose ``index`` (and text,
        ``values[i]: ...``) names its place in ``values``, and no message of the batch
        is written. ``values`` is held in memory, encoded, until it is written: send a
        long stream in batches of some hundreds. A failure while writing
        (:class:`~atomickafka.client.QueueFullError`) leaves the messages before it
        written. Each record is byte for byte the one :meth:`send` writes for the same
        messageID and send time.

        ``message_ids`` (one per value) gives the messages ids of the caller's making
        instead of this client's: a producer that sends the same messages again after a
        failure (a replayed Spark batch, :mod:`atomickafka.spark`) gives them the same
        ids, and the nodes take the second copy for the first (docs/DESIGN.md §4.13,
        within the memory window). A message is its id *and* its version, so such a
        resend must carry the same send time: ``sent_at_ms`` states it (ms since the
        epoch), or ``None`` states none (then no copy is ever late, §4.13); ``"now"``,
        the default, is this client's clock.
        """
        sent = self._publish(
            values, destinations, via, key, headers, on_delivery, 0, message_ids, sent_at_ms
        )
        return [message[0] for message in sent]

    def _publish(
        self,
        values: Iterable[Any],
        destinations: Iterable[str],
        via: str | None,
        key: str | bytes | None,
        headers: UserHeaders | None,
        on_delivery: OnDelivery | None,
        first_index: int | None,
        message_ids: Sequence[str] | None = None,
        sent_at_ms: int | Literal["now"] | None = "now",
    ) -> list[_Encoded]:
        """:meth:`send_batch`, and :meth:`send` with one value: the messages written;
        ``first_index``: the index of the first value that errors name (``None``: none,
        as :meth:`send`)."""
        if message_ids is not None:
            values = _one_id_each(values, message_ids)
        topics = parse_destinations(destinations)
        if via is not None and not is_valid_topic_name(via):
            raise MessageError("via", "not a valid topic name", via)
        now = time.monotonic()
        route = self._route(topics, via, now)
        if route.lagging:  # a destination's node lags more than max_lag_s behind its input
            self._hold_back([*topics, via] if via is not None else list(topics))
        record_key = key.encode() if isinstance(key, str) else key
        records = self._records(topics, record_key, _user_headers(headers), sent_at_ms)
        encoded = self._encode(values, records, route.partitions, first_index, message_ids)
        if self._pace is not None:
            self._paced([*topics, via] if via is not None else topics, len(encoded))
        producer = self._ensure_producer()
        if self._rerouted:
            self._send_rerouted()
        signer = self._signer
        for message_id, value, layer, payload, record_headers in encoded:
            # where each copy goes (poc, optimized: one destination, the one the nodes
            # would pick), and which take the direct lane
            planned = copies(message_id, route.targets, route.by_id, route.lanes, self._lane, now)
            report: DeliveryCallback
            if on_delivery is None:  # only a failure matters: nothing to count per message
                report = functools.partial(self._on_record, message_id)
            else:
                sent = SentMessage(message_id, topics, value, via, key, layer, len(planned))
                report = _Pending(sent, self._failed, on_delivery).on_delivery
            for copy in planned:
                input_log = input_topic(copy.topic, self.layout)
                log_to = input_log
                copy_report: DeliveryCallback = report
                if copy.direct:  # this copy takes the direct lane
                    log_to = control_topic(copy.topic)
                    self.direct_copies += 1
                    copy_report = _LaneCopy(
                        self, input_log, payload, record_key, layer, record_headers, report
                    ).on_delivery
                _send_copy(
                    producer, signer, log_to, payload, record_key, layer, record_headers,
                    copy_report,
                )  # fmt: skip
        if now - self._polled_at >= _POLL_EVERY_S:  # delivery reports, now and then
            self._polled_at = now
            producer.poll(0)
        return encoded

    def _records(
        self,
        topics: tuple[str, ...],
        key: bytes | None,
        headers: tuple[Header, ...],
        sent_at_ms: int | Literal["now"] | None = "now",
    ) -> ClientRecords:
        """What builds the records of messages to ``topics`` with this key and these
        headers sent now (raw form, docs/DESIGN.md §3.8): the headers they all carry,
        built once per millisecond (the send time's unit), not per :meth:`send`. A send
        time of the caller's (``sent_at_ms``) gets a builder of its own."""
        if sent_at_ms != "now":
            return ClientRecords(
                topics, self.client_id, sent_at=sent_at_ms, key=key, headers=headers
            )
        sent_at = int(time.time() * 1000)
        if sent_at != self._records_at:
            self._records_at = sent_at
            self._builders.clear()
        wanted = (topics, key, headers)
        records = self._builders.get(wanted)
        if records is None:
            records = self._builders[wanted] = ClientRecords(
                topics, self.client_id, sent_at=sent_at, key=key, headers=headers
            )
        return records

    def _encode(
        self,
        values: Iterable[Any],
        records: ClientRecords,
        partitions: int,
        first_index: int | None,
        message_ids: Sequence[str] | None = None,
    ) -> list[_Encoded]:
        """Each value's messageID and record, in order, all before any is written: a
        :class:`MessageError` (naming the value's index unless ``first_index`` is
        ``None``) for the first that cannot be sent. The layer is the key's, else
        round-robin by sequence number; ``None`` when unpartitioned."""
        out: list[_Encoded] = []
        limit, prefix, seqs = self.max_value_bytes, self.id_prefix, self._seq
        layer: int | None = None
        spread = 0  # round-robin over this many layers
        if partitions > 1:
            if records.key is None:
                spread = partitions
            else:  # messages with one key keep one layer
                layer = zlib.crc32(records.key) % partitions
        for offset, value in enumerate(values):
            seq = next(seqs)
            message_id = f"{prefix}-{seq}" if message_ids is None else message_ids[offset]
            if spread:  # a caller's id: the same layer whenever it is sent again
                layer = (
                    seq % spread
                    if message_ids is None
                    else zlib.crc32(message_id.encode()) % spread
                )
            try:
                _, payload, record_headers = records.record(message_id, value, layer)
            except MessageError as exc:
                if first_index is None or exc.field != "value":
                    raise
                raise MessageError(
                    exc.field, exc.reason, value, index=first_index + offset
                ) from None
            if len(payload) > limit:
                raise MessageError(
                    "value",
                    f"{len(payload)} bytes as JSON; AtomicKafka carries at most {limit} "
                    "bytes (MAX_VALUE_BYTES)",
                    index=None if first_index is None else first_index + offset,
                )
            out.append((message_id, value, layer, payload, record_headers))
        return out

    def _hold_back(self, topics: list[str]) -> None:
        """Back-pressure: wait while a node of ``topics`` lags more than ``max_lag_s``
        behind its input (as its status says), reading the statuses again every quarter
        second; :class:`~atomickafka.client.QueueFullError` after ``max_block_s``."""
        lagging = self._lagging(topics, self._statuses())
        if lagging is None:
            return
        started = time.monotonic()
        deadline = started + self.max_block_s
        try:
            while lagging is not None:
                topic, lag_s = lagging
                if time.monotonic() >= deadline:
                    raise QueueFullError(
                        f"the node of {topic} is {lag_s:.1f} s behind its input (waited or "
                        f"left to read), more than {self.max_lag_s:g} s, for the "
                        f"{self.max_block_s:g} s "
                        "this client waits (max_lag_s, max_block_s): it cannot keep up"
                    )
                time.sleep(_LAG_POLL_S)
                if self._producer is not None:
                    self._producer.poll(0)
                try:
                    lagging = self._lagging(topics, self._statuses(force=True))
                except KafkaException:
                    continue
        finally:
            held = time.monotonic() - started
            self.held_back_s += held
            if self._pace is not None:
                self._pace.held(topics, held)

    def _paced(self, topics: Sequence[str], n: int) -> None:
        """Pacing: wait until ``n`` messages to ``topics`` are within their destinations'
        rates (:class:`~atomickafka.client.plan.Pace`); a wait shorter than
        :data:`_PACE_SLEEP_S` is carried to the next send."""
        assert self._pace is not None
        wait = self._pace.take(topics, n, time.monotonic())
        if wait >= _PACE_SLEEP_S:
            wait = min(wait, self.max_block_s)  # a long batch owes the rest
            if self._producer is not None:
                self._producer.poll(0)
            time.sleep(wait)
            self.paced_s += wait
            self.held_back_s += wait

    def _judge_pace(self, statuses: Mapping[str, Status]) -> None:
        """Set each paced destination's rate from statuses just read, once per status
        (a destination whose newest node status was judged already keeps its rate)."""
        assert self._pace is not None
        views, now = _views(statuses, time.time()), time.monotonic()
        stamps: dict[str, float] = {}
        for status in statuses.values():
            if status.role is Role.NODE:
                stamps[status.topic] = max(stamps.get(status.topic, status.time), status.time)
        for topic in self._pace.topics:
            behind = worst_behind(topic, views)
            if behind is not None:
                self._pace.judge(topic, behind, now, stamp=stamps[topic])

    def _lagging(
        self, topics: list[str], statuses: Mapping[str, Status]
    ) -> tuple[str, float] | None:
        """The first of ``topics`` whose node (any layer's) lags more than allowed, with
        how far behind it is now; ``None`` when none does.

        A status says how far behind the node was when it was taken
        (:attr:`~atomickafka.kafka.status.Status.behind_s`); a node that works through
        its backlog is that much less behind each second since. Waiting for a status
        that says "caught up" instead left the node idle: statuses come every quarter
        second and are read every quarter second, and the bench's capacity burst found
        a node waiting for input 45 % of the time while its clients were held back. A
        node that does not move says so in its next status (its oldest record's age
        grows), so this lets a client write at most a status interval early."""
        limit = self.max_lag_s
        assert limit is not None
        return lagging(topics, _views(statuses, time.time()), limit)

    def _on_record(self, message_id: str, error: KafkaError | None, _record: KafkaMessage) -> None:
        """The delivery report of a record of ``message_id``, sent without
        ``on_delivery``: only a failure matters (once per message, :meth:`flush`
        reports it)."""
        if error is not None and all(known != message_id for known, _ in self._failures):
            self._failed(message_id, error)

    def _lane_refused(self, copy: _LaneCopy, control_log: str, error: KafkaError) -> None:
        """A control log refused a lane copy: close the lane and write the copy again,
        to its input log, at the next :meth:`send` or :meth:`flush` (not from inside a
        delivery report)."""
        if self.lane_refused is None:
            self.lane_refused = f"{control_log}: {error.str()}"
            self._lane.close()
            self._routes.clear()  # their lanes were judged with the lane open
            log.warning(
                "the direct lane is closed: %s refused a copy (%s); every copy now goes to "
                "the input logs. Grant clients Write on atomickafka-ctl.* or give them "
                "direct_rate=0 (docs/operators.md, ACLs)",
                control_log,
                error.str(),
            )
        self.direct_copies -= 1
        self._rerouted.append(copy)

    def _send_rerouted(self) -> None:
        """Write the refused lane copies to their input logs."""
        rerouted, self._rerouted = self._rerouted, []
        producer, signer = self._ensure_producer(), self._signer
        for copy in rerouted:
            _send_copy(
                producer, signer, copy.input_log, copy.payload, copy.key, copy.layer,
                copy.headers, copy.report,
            )  # fmt: skip

    def _flush_all(self, timeout_s: float) -> int:
        """Flush, writing refused lane copies again as their reports come, for up to
        ``timeout_s``; the records still unacknowledged."""
        if self._producer is None:
            return 0
        deadline = time.monotonic() + timeout_s
        remaining = self._producer.flush(timeout_s)
        while self._rerouted:  # written to input logs: they are not refused again
            self._send_rerouted()
            remaining = self._producer.flush(max(0.0, deadline - time.monotonic()))
        return remaining

    def _failed(self, message_id: str, error: KafkaError) -> None:
        """A record of ``message_id`` was not written: :meth:`flush` reports it."""
        self._failures.append((message_id, error))

    def _route(self, topics: tuple[str, ...], via: str | None, now: float) -> _Route:
        """Where a message to ``topics`` (written via ``via``) goes: judged once per
        route until the statuses are read again (every quarter second), not per message;
        raises :class:`OfflineDestinationError` for a topic no live node serves. A
        destination whose node's status is only late
        (:meth:`~atomickafka.kafka.status.Status.late`: Kafka may be failing over), or a
        status topic that cannot be read, is waited for, up to ``failover_wait_s``,
        before it is refused."""
        key = (topics, via)
        known: _Judged | None
        try:
            statuses = self._statuses() if now - self._watched_at >= _REFRESH_S else None
        except KafkaException as exc:  # the status topic unreadable: Kafka failing over?
            known = _Late(f"the status topic could not be read ({exc})")
        else:
            known = self._routes.get(key)
            if known is None:
                if statuses is None:
                    statuses = self._watch.statuses if self._watch is not None else {}
                known = self._routes[key] = self._plan(topics, via, statuses)
        if isinstance(known, _Late):
            known = self._routes[key] = self._wait_out(topics, via, known)
        if isinstance(known, DestinationError):
            raise type(known)(str(known))  # a fresh one: no traceback piles up
        return known

    def _wait_out(
        self, topics: tuple[str, ...], via: str | None, late: _Late
    ) -> _Route | DestinationError:
        """Wait, up to ``failover_wait_s``, for the statuses to be live again (reading
        the status topic every half second); then judge as usual, a destination still
        late being refused (and then at once, until its node publishes again)."""
        log.warning(
            "waiting up to %.0f s before sending to %s: %s (a Kafka failover?)",
            self.failover_wait_s,
            ", ".join(dict.fromkeys([*topics, via] if via is not None else topics)),
            late.reason,
        )
        deadline = time.monotonic() + self.failover_wait_s
        statuses = self._watch.statuses if self._watch is not None else {}
        while time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            try:
                statuses = self._statuses(force=True)
            except KafkaException:
                continue
            planned = self._plan(topics, via, statuses)
            if not isinstance(planned, _Late):
                return planned
        planned = self._plan(topics, via, statuses, waited=True)
        assert not isinstance(planned, _Late)
        return planned

    def _plan(
        self,
        topics: tuple[str, ...],
        via: str | None,
        statuses: dict[str, Status],
        *,
        waited: bool = False,
    ) -> _Judged:
        """The route of a message to ``topics`` written via ``via``, as ``statuses``
        say, or what refuses it."""
        destinations = [*topics, via] if via is not None else list(topics)
        judged = self._judge(destinations, statuses, waited=waited)
        if isinstance(judged, DestinationError | _Late):
            return judged
        algorithm, partitions = judged
        targets, by_id = route(topics, via, algorithm)
        behind = self.max_lag_s is not None and self._lagging(destinations, statuses) is not None
        lanes = self._lanes(targets, statuses) if self._lane.open else frozenset()
        return _Route(algorithm, partitions, targets, by_id, behind, lanes)

    def _lanes(self, targets: Iterable[str], statuses: Mapping[str, Status]) -> frozenset[str]:
        """The targets whose copies may take the direct lane
        (:func:`~atomickafka.client.plan.lane_targets`)."""
        return frozenset(lane_targets(targets, _views(statuses, time.time())))

    def _judge(
        self, topics: list[str], statuses: dict[str, Status], *, waited: bool = False
    ) -> _Verdict:
        """The route's protocol and layers, the error that refuses it, or -- a node's
        status only late, not yet waited for -- :class:`_Late`."""
        now = time.time()
        offline = []
        late = []
        algorithms: set[Algorithm] = set()
        layers: list[int] = []
        for topic in dict.fromkeys(topics):
            mine = [s for s in statuses.values() if s.topic == topic]
            nodes = [s for s in mine if s.role is Role.NODE]
            if not nodes or not all(s.live(now) for s in mine):
                excused = bool(nodes) and all(s.live(now) or s.late(now) for s in mine)
                may_wait = self.failover_wait_s > 0 and not waited
                if excused and may_wait and self._given_up.get(topic) != _newest(mine):
                    late.append(_describe(topic, mine, now))
                else:
                    offline.append(_describe(topic, mine, now))
                    if excused and waited:
                        self._given_up[topic] = _newest(mine)
                    continue
            algorithms.update(s.algorithm for s in nodes)
            layers.append(min(s.partitions for s in nodes))
        if offline and not self.allow_offline:
            waited_for = f" (waited {self.failover_wait_s:.0f} s for it)" if waited else ""
            return OfflineDestinationError(
                f"no live AtomicKafka node for {'; '.join(offline)}{waited_for}: start one "
                "(atomickafka node/cluster), or send with allow_offline / --allow-offline"
            )
        if late and not self.allow_offline:
            return _Late("; ".join(late))
        unsigned = self._cannot_sign(topics, statuses, now)
        if unsigned is not None:
            return unsigned
        if len(algorithms) > 1:
            return DestinationError(
                f"the destinations' nodes run different protocols ({', '.join(sorted(algorithms))})"
            )
        algorithm = algorithms.pop() if algorithms else self.algorithm or DEFAULT_ALGORITHM
        return algorithm, min(layers, default=1)

    def _cannot_sign(
        self, topics: list[str], statuses: dict[str, Status], now: float
    ) -> SigningError | None:
        """A :class:`SigningError` when a destination's live nodes check signatures this
        client cannot make (no secret, or one they do not accept): every copy would be
        set aside as unsigned or wrongly signed (§4.14), and the send look like a
        success."""
        signs_with = None if self._signer is None else self._signer.key_ids()[0]
        for topic in dict.fromkeys(topics):
            for status in statuses.values():
                keys = status.signing_keys
                if status.topic != topic or not keys or not status.live(now):
                    continue
                if signs_with is None:
                    return SigningError(
                        f"the nodes of {topic!r} check signatures (signing is on there): give "
                        "this client the deployment's secret (secret_file / --secret-file); "
                        "unsigned, the message would be set aside at every destination"
                    )
                if signs_with not in keys:
                    return SigningError(
                        f"the nodes of {topic!r} accept none of this client's secret (its "
                        f"key id {signs_with}, theirs {', '.join(keys)}): sign with the "
                        "deployment's secret (the first line of its secret file)"
                    )
        return None

    def _statuses(self, *, force: bool = False) -> dict[str, Status]:
        if self._watch is None:
            self._watch = StatusWatch(self.connection, timeout_s=_STATUS_TIMEOUT_S)
        now = time.monotonic()
        if force or now - self._watched_at >= _REFRESH_S:
            self._watched_at = now
            self._routes.clear()  # judged again against what was read now
            statuses = self._watch.refresh()
            if self._pace is not None:
                self._judge_pace(statuses)
            self._polled_at = now  # and the delivery reports served meanwhile
            if self._producer is not None:
                self._producer.poll(0)
            return statuses
        return self._watch.statuses

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch metadata for ``topics``' input logs (and the control logs of the direct
        lane) and read the node statuses now, so the first :meth:`send` does not wait
        for them (before latency-sensitive traffic)."""
        wanted = parse_destinations(topics)
        names = [input_topic(t, self.layout) for t in wanted]
        statuses = self._statuses(force=True)
        if self._lane.open:
            names += [control_topic(t) for t in self._lanes(wanted, statuses)]
        self._ensure_producer().warm_up(names, timeout_s)

    def flush(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Wait until every sent message is acknowledged (serving ``on_delivery``
        callbacks); raise :class:`~atomickafka.client.DeliveryError`, naming each
        message that was not written, if some were not."""
        remaining = self._flush_all(timeout_s)
        failures, self._failures = self._failures, []
        if remaining or failures:
            raise DeliveryError(failures, remaining, timeout_s)

    def _ensure_producer(self) -> RecordProducer:
        if self._producer is None:
            # A copy reaching a log later than the nodes' lateness bound is set aside
            # (docs/DESIGN.md §4.13): give up on a write well before that.
            role: dict[str, str | int | bool] = {
                "client.id": self.client_id,
                "message.timeout.ms": CLIENT_TIMEOUT_MS,
            }
            if not self.idempotent:
                role["enable.idempotence"] = False
            self._producer = RecordProducer(self.connection, **role)
        return self._producer

    # ------------------------------------------------------------------ reading

    def reader(
        self,
        topic: str,
        *,
        from_beginning: bool = True,
        group: str | None = None,
        writers: Iterable[str] | None = None,
        committed_only: bool = False,
    ) -> DeliveryReader:
        """A :class:`~atomickafka.client.DeliveryReader` of ``topic``'s deliveries, with
        this client's settings; use it in a ``with`` block, which closes its consumer.
        ``committed_only``: see the reader."""
        return DeliveryReader(
            self.connection,
            topic,
            from_beginning=from_beginning,
            secret=self._secret,
            secret_file=self._secret_file,
            group=group,
            writers=writers,
            committed_only=committed_only,
        )

    def deliveries(
        self,
        topic: str,
        *,
        from_beginning: bool = True,
        timeout_s: float | None = None,
        max_messages: int | None = None,
        group: str | None = None,
        writers: Iterable[str] | None = None,
    ) -> Iterator[Delivery]:
        """Yield ``topic``'s deliveries in order, hiding control records and duplicates.

        Stops after ``max_messages`` deliveries, or once no delivery arrived for
        ``timeout_s`` seconds (``None``: wait forever). With ``group`` (a consumer
        group), it goes on where that group's reader stopped, without repeating
        anything. Its consumer is closed when the iteration ends; stopping early leaves
        it open until the iterator is collected, so prefer :meth:`reader` there.
        """
        with self.reader(
            topic, from_beginning=from_beginning, group=group, writers=writers
        ) as reader:
            yield from reader.deliveries(timeout_s=timeout_s, max_messages=max_messages)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Wait until every sent message is acknowledged (up to 30 s), then release the
        Kafka clients; raise :class:`~atomickafka.client.DeliveryError` if some were not
        (the clients are released either way)."""
        error = self._release(CLOSE_TIMEOUT_S)
        if error is not None:
            raise error

    def _release(self, timeout_s: float) -> DeliveryError | None:
        """Release the Kafka clients, waiting up to ``timeout_s`` for what was sent;
        return the error to report, if any."""
        started = time.monotonic()
        try:  # refused lane copies are written again before the producer goes
            self._flush_all(timeout_s)
        except KafkaException:
            log.exception("flushing before release failed")
        timeout_s = max(0.0, timeout_s - (time.monotonic() - started))
        producer, self._producer = self._producer, None
        watch, self._watch = self._watch, None
        try:
            if watch is not None:
                watch.close()
        finally:
            # records not acknowledged in time are purged: their messages fail
            remaining = 0 if producer is None else producer.close(timeout_s)
        failures, self._failures = self._failures, []
        if remaining or failures:
            return DeliveryError(failures, remaining, timeout_s)
        return None

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            self.close()
            return
        try:  # an exception is on its way: never replace it with another
            error = self._release(CLOSE_ON_ERROR_TIMEOUT_S)
        except Exception:
            log.exception("releasing the client after %s failed", type(exc).__name__)
            return
        if error is not None:
            log.error("leaving after %s: %s", type(exc).__name__, error)


def _send_copy(
    producer: RecordProducer,
    signer: Signer | None,
    log: str,
    payload: bytes,
    key: bytes | None,
    layer: int | None,
    headers: Sequence[tuple[str, bytes]],
    report: DeliveryCallback,
) -> None:
    """Write one copy of a message to ``log``, signed for it when the client signs."""
    written = cast(RecordHeaders, headers)  # only read: librdkafka copies them
    if signer is not None:
        written = cast(RecordHeaders, signer.signed_headers(log, key, payload, headers))
    producer.send(log, payload, key=key, partition=layer, headers=written, on_delivery=report)


def client_id_is_valid(client_id: str) -> bool:
    """Client ids become messageID prefixes: keep them short and plain."""
    return 0 < len(client_id) <= 64 and is_valid_topic_name(client_id)


def _user_headers(headers: UserHeaders | None) -> tuple[Header, ...]:
    """The user's headers as (name, bytes) pairs; names AtomicKafka reserves refused."""
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for name, value in pairs:
        if not isinstance(name, str) or name.startswith(RESERVED_HEADER_PREFIX):
            reason = f"names starting {RESERVED_HEADER_PREFIX} are reserved"
            raise MessageError("headers", reason, name)
        out.append((name, value.encode() if isinstance(value, str) else bytes(value)))
    return tuple(out)


class _Late:
    """A route whose nodes' statuses are only late (Kafka may be failing over): wait."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


#: What a route was judged: its protocol and layers, the error refusing it, or late.
_Verdict = tuple[Algorithm, int] | DestinationError | _Late
_Judged = _Route | DestinationError | _Late


def _views(statuses: Mapping[str, Status], now: float) -> dict[str, list[NodeView]]:
    """What the statuses say of each topic's nodes, as the client's plan takes it
    (:mod:`atomickafka.client.plan`): how far behind each said it was, and how long ago."""
    views: dict[str, list[NodeView]] = {}
    for status in statuses.values():
        if status.role is Role.NODE:
            since = now - status.time
            view = NodeView(
                status.topic, status.live(now), status.control_log, status.behind_s, since
            )
            views.setdefault(status.topic, []).append(view)
    return views


def _newest(statuses: list[Status]) -> float:
    """When the newest of ``statuses`` was taken."""
    return max((s.time for s in statuses), default=0.0)


def _describe(topic: str, statuses: list[Status], now: float) -> str:
    if not statuses:
        window = f"{STATUS_READ_WINDOW_S:.0f} s"
        return f"{topic!r} (no node has published a status in the last {window})"
    newest = max(statuses, key=lambda s: s.time)
    if newest.is_stopped:
        return f"{topic!r} (its node stopped {newest.age_s(now):.0f} s ago)"
    return f"{topic!r} (last status {newest.age_s(now):.0f} s ago)"
