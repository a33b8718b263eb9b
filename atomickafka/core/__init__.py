"""The pure core: the wire format, the ordering engine and the merger's core.

Nothing in this package does I/O: no Kafka, no clock, no randomness, no OS, no threads
(``tests/unit/test_layout.py`` enforces it). Records go in, records come out; the Kafka
shells in :mod:`atomickafka.node` feed them. See ``docs/DESIGN.md``.
"""
