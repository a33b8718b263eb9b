"""AtomicKafka's pure cores: state machines with no Kafka, clock, randomness or threads."""
