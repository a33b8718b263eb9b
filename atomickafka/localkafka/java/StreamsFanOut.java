/*
 * AtomicKafka's Kafka Streams baseline: what a Kafka team writes for one order across
 * topics. Every message goes through one partition (the sequencer topic); this
 * application reads it and writes each message to each of its destinations, with
 * processing.guarantee=exactly_once_v2 (one transactional producer per stream thread,
 * KIP-447; a commit every commit.interval.ms, 100 ms by default), so every destination
 * holds its messages once, in the sequencer's order, after any crash.
 *
 * The records keep AtomicKafka's wire format, as the Python sequencers write them
 * (atomickafka/evaluation/load/sequencer.py): a ClientMessage in; one DeliveryMessage
 * per destination out, the client's object with messageType, senderID, sentFromTopic
 * (the destination) and timeStamp (the sequencer offset) set, the atomickafka-type
 * header, and the time of writing as its Kafka timestamp. A record that is no
 * ClientMessage, or names a destination that cannot be a topic, is skipped with a
 * warning.
 *
 * Usage: StreamsFanOut BOOTSTRAP SOURCE_TOPIC APPLICATION_ID STATE_DIR SENDER_ID [COMMIT_MS]
 * Prints "atomickafka-streams: RUNNING" on stdout once its thread runs, and exits 1 when
 * the application fails.
 */
package io.atomickafka.baseline;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.TopicNameExtractor;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public final class StreamsFanOut {
    static final String READY = "atomickafka-streams: RUNNING";
    static final String TYPE_HEADER = "atomickafka-type";
    static final String CLIENT = "ClientMessage";
    static final String DELIVERY = "DeliveryMessage";
    /** What Kafka takes as a topic name. */
    static final Pattern TOPIC = Pattern.compile("[a-zA-Z0-9._-]{1,249}");
    static final ObjectMapper JSON = new ObjectMapper();
    static final Logger LOG = LoggerFactory.getLogger(StreamsFanOut.class);

    private StreamsFanOut() {}

    /** One Delivery record and the topic it goes to. */
    record Routed(String destination, byte[] value) {}

    /** The sink's serializer: the Delivery's bytes (the destination is the extractor's). */
    static final class RoutedSerializer implements Serializer<Routed> {
        @Override
        public byte[] serialize(String topic, Routed routed) {
            return routed == null ? null : routed.value();
        }
    }

    /** Never read back: the sink only writes. */
    static final class NoDeserializer implements Deserializer<Routed> {
        @Override
        public Routed deserialize(String topic, byte[] data) {
            throw new UnsupportedOperationException("Delivery records are not read back");
        }
    }

    /** The sink's TopicNameExtractor: each Delivery goes to its destination. */
    static final class ByDestination implements TopicNameExtractor<byte[], Routed> {
        @Override
        public String extract(
                byte[] key, Routed value, org.apache.kafka.streams.processor.RecordContext ctx) {
            return value.destination();
        }
    }

    /** A ClientMessage in, one Delivery per destination out. */
    static final class FanOut implements Processor<byte[], byte[], byte[], Routed> {
        private final String senderId;
        private ProcessorContext<byte[], Routed> context;

        FanOut(String senderId) {
            this.senderId = senderId;
        }

        @Override
        public void init(ProcessorContext<byte[], Routed> context) {
            this.context = context;
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            long offset = context.recordMetadata().map(RecordMetadata::offset).orElse(-1L);
            ObjectNode message = clientMessage(record.value(), offset);
            if (message == null) {
                return;
            }
            JsonNode topics = message.get("topic");
            long now = System.currentTimeMillis();
            for (JsonNode destination : topics) {
                String topic = destination.asText();
                ObjectNode delivery = message.deepCopy();
                delivery.put("messageType", DELIVERY);
                delivery.put("senderID", senderId);
                delivery.put("sentFromTopic", topic);
                delivery.put("timeStamp", offset);
                byte[] bytes;
                try {
                    bytes = JSON.writeValueAsBytes(delivery);
                } catch (IOException e) {
                    LOG.warn("skipping the sequencer record at offset {}: {}", offset, e.toString());
                    return;
                }
                RecordHeaders headers = new RecordHeaders();
                headers.add(TYPE_HEADER, DELIVERY.getBytes(StandardCharsets.UTF_8));
                context.forward(new Record<>(null, new Routed(topic, bytes), now, headers));
            }
        }

        /** The ClientMessage ``value`` holds, or null (with a warning) for anything else. */
        private static ObjectNode clientMessage(byte[] value, long offset) {
            JsonNode parsed;
            try {
                parsed = value == null ? null : JSON.readTree(value);
            } catch (IOException e) {
                LOG.warn("skipping a malformed sequencer record at offset {}: {}", offset, e.toString());
                return null;
            }
            if (!(parsed instanceof ObjectNode message)
                    || !CLIENT.equals(message.path("messageType").asText())) {
                LOG.warn("skipping a sequencer record at offset {}: not a ClientMessage", offset);
                return null;
            }
            JsonNode topics = message.get("topic");
            if (topics == null || !topics.isArray() || topics.isEmpty()) {
                LOG.warn("skipping a sequencer record at offset {}: no destination list", offset);
                return null;
            }
            for (JsonNode destination : topics) {
                if (!destination.isTextual() || !TOPIC.matcher(destination.asText()).matches()) {
                    LOG.warn("skipping a sequencer record at offset {}: {} is no topic name",
                            offset, destination);
                    return null;
                }
            }
            return message;
        }
    }

    static Properties settings(String bootstrap, String appId, String stateDir, long commitMs) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // Static membership: a restarted instance takes its place in the group at once
        // instead of waiting out the dead one's session (45 s by default).
        props.put(
                StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG),
                appId + "-instance");
        return props;
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length < 5 || args.length > 6) {
            System.err.println(
                    "usage: StreamsFanOut BOOTSTRAP SOURCE_TOPIC APPLICATION_ID STATE_DIR SENDER_ID"
                            + " [COMMIT_MS]");
            System.exit(2);
        }
        long commitMs;
        try {
            commitMs = args.length == 6 ? Long.parseLong(args[5]) : 100L;
        } catch (NumberFormatException e) {
            System.err.println("COMMIT_MS must be a whole number of milliseconds, not " + args[5]);
            System.exit(2);
            return;
        }
        Serde<Routed> routed = Serdes.serdeFrom(new RoutedSerializer(), new NoDeserializer());
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[1], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .process(() -> new FanOut(args[4]))
                .to(new ByDestination(), Produced.with(Serdes.ByteArray(), routed));
        KafkaStreams streams =
                new KafkaStreams(builder.build(), settings(args[0], args[2], args[3], commitMs));
        CountDownLatch done = new CountDownLatch(1);
        int[] status = {0};
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println(READY);
                System.out.flush();
            } else if (now == KafkaStreams.State.ERROR) {
                status[0] = 1;
                done.countDown();
            } else if (now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exc -> {
            LOG.error("the fan-out failed", exc);
            status[0] = 1;
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            done.countDown();
        }));
        streams.start();
        done.await();
        streams.close(Duration.ofSeconds(30));
        System.exit(status[0]);
    }
}
