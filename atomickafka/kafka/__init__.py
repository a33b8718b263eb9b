"""Kafka I/O shared by every role: librdkafka settings, the producer wrapper, consumer
helpers, topic names and administration."""
