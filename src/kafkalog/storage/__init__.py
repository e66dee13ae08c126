"""kafkalog.storage: file I/O, one on-disk noun per module, no policy (Kafka's
org.apache.kafka.storage.internals.log).

File records, the offset / time / transaction indexes, the segment, the segment list, file
names, atomic file helpers and checkpoint files. Decisions (when to roll, what to delete) live in
``kafkalog.log``.
"""
