"""A LogManager holds one descriptor per segment, as a Kafka broker does: none per partition
for a lock, none for an index file between its writes, and read mappings (each of which holds a
descriptor in CPython) for the most recently read files only."""

from __future__ import annotations

import os
from pathlib import Path

from kafkalog import LogManager, Record
from kafkalog.log.config import LogConfig
from kafkalog.storage.mappings import MAX_CACHED_MAPPINGS

PARTITIONS, SEGMENTS = 100, 3


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_one_descriptor_per_segment_however_many_partitions_are_read(tmp_path: Path) -> None:
    before = _open_descriptors()
    with LogManager(tmp_path, default_config=LogConfig(segment_bytes=1 << 20)) as manager:
        manager.create_topic("t", PARTITIONS)
        assert _open_descriptors() - before == PARTITIONS + 1  # one segment each, and .lock
        for p in range(PARTITIONS):
            log = manager.get_log("t", p)
            for _ in range(SEGMENTS - 1):
                log.append([Record(b"x" * 100)])
                log.roll()
            log.append([Record(b"x" * 100)])
        segments = PARTITIONS * SEGMENTS
        assert _open_descriptors() - before <= segments + 1
        for _ in range(2):  # every partition read, from its first segment and its last
            for p in range(PARTITIONS):
                log = manager.get_log("t", p)
                assert log.read(0, 1 << 16).records is not None
                assert log.read(SEGMENTS - 1, 1 << 16).records is not None
        assert _open_descriptors() - before <= segments + 1 + MAX_CACHED_MAPPINGS
        for log in manager.logs().values():  # index files written and synced, and closed again
            log.flush()
        assert _open_descriptors() - before <= segments + 1 + MAX_CACHED_MAPPINGS
    assert _open_descriptors() <= before  # (mappings other files kept may have gone too)


def test_threads_reading_many_partitions_keep_the_bound_and_read_everything(
    tmp_path: Path,
) -> None:
    """Four threads read 100 partitions at once: files evict each other's mappings without a
    lock order between them, every read sees its record, and the mappings stay bounded."""
    import threading

    before = _open_descriptors()
    errors: list[BaseException] = []
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", PARTITIONS)
        for p in range(PARTITIONS):
            manager.get_log("t", p).append([Record(b"v%d" % p)])

        def reader(seed: int) -> None:
            try:
                for i in range(20 * PARTITIONS):
                    p = (i * (seed + 7)) % PARTITIONS
                    info = manager.get_log("t", p).read(0, 1 << 16)
                    assert info.records is not None and info.records.size > 0
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        assert _open_descriptors() - before <= PARTITIONS + 1 + MAX_CACHED_MAPPINGS
