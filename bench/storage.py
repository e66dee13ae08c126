"""Storage core: appends, reads, recovery and index lookups, each beside a raw baseline
measured in the same run on the same bytes (page cache; this VM's disk is not what is measured).
"""

from __future__ import annotations

import bisect
import mmap
import os
import random
import shutil
import statistics
import struct
import time
from collections.abc import Callable
from pathlib import Path

import crc32c
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from bench.harness import Row, in_temp_dir
from kafkalog import ManualClock, MemoryRecords, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.records.batch import set_last_offset
from kafkalog.storage.segment import LogSegment

MIB = 1 << 20
NOW = 1_700_000_000_000
BIG = LogConfig.from_properties(
    {"segment.bytes": 2**31 - 1, "retention.ms": -1, "max.message.bytes": 2 * MIB}
)


def template(record_size: int, batch_bytes: int) -> tuple[bytearray, int]:
    """One uncompressed v2 batch of about ``batch_bytes``; returns it and its record count."""
    n = max(1, batch_bytes // (record_size + 12))
    recs = [Record(b"v" * record_size, key=b"key-%06d" % i, timestamp=NOW + i) for i in range(n)]
    return bytearray(bytes(MemoryRecords.build(recs))), n


def at_offset(tpl: bytearray, n: int, base: int) -> bytes:
    out = bytearray(tpl)
    set_last_offset(out, 0, base + n - 1)
    return bytes(out)


def seconds_in_new_log(directory: Path, feed: Callable[[Log], object]) -> float:
    """Open a fresh log, time ``feed(log)``, then drop the log (no flush: the same page-cache
    writes the raw baselines measure)."""
    log = Log.open(directory, BIG, ManualClock(NOW))
    start = time.perf_counter()
    feed(log)
    elapsed = time.perf_counter() - start
    log.close_without_flush()
    shutil.rmtree(directory)
    return elapsed


def seconds_to_write(path: Path, chunks: list[bytes]) -> float:
    """The raw baseline: ``os.write`` of the same bytes into a fresh file (page cache)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for chunk in chunks:
        os.write(fd, chunk)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return elapsed


def paired(ours: list[float], raw: list[float]) -> float:
    """Median of the per-round ratios of interleaved rounds."""
    return statistics.median(o / r for o, r in zip(ours, raw, strict=True))


def alternate(
    ours_fn: Callable[[], float], raw_fn: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """Seven rounds of ours then raw, alternating, so the VM's drift hits both alike."""
    ours, raw = [], []
    for _ in range(7):
        ours.append(ours_fn())
        raw.append(raw_fn())
    return ours, raw


def median_rate(fn: Callable[[], float], rounds: int = 3) -> float:
    return statistics.median(fn() for _ in range(rounds))


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-", _run)


def _run(root: Path) -> list[Row]:
    rows: list[Row] = []
    tpl, per_batch = template(1000, MIB)
    count = 256
    batches = [at_offset(tpl, per_batch, i * per_batch) for i in range(count)]
    total = sum(len(b) for b in batches)

    # --- follower append of pre-built 1 MiB batches vs os.write of the same bytes -------------
    def follower() -> float:
        elapsed = seconds_in_new_log(
            root / "follower-0", lambda log: [log.append_as_follower(x) for x in batches]
        )
        return total / elapsed / MIB

    def raw_write() -> float:
        return total / seconds_to_write(root / "raw.bin", batches) / MIB

    follower(), raw_write()  # warm-up
    ours, raw = alternate(follower, raw_write)
    rows.append(
        Row(
            "storage",
            "follower append, 1 MiB batches (256 MiB)",
            "MB/s",
            statistics.median(ours),
            "os.write same bytes",
            statistics.median(raw),
            target=0.8,
            paired_ratio=paired(ours, raw),
            notes="256 batches of 1,000 records (1 KiB values), appended as a follower does: "
            "CRC and offset checks, index entries, one write per batch",
        )
    )

    # --- leader append of the same batches, as a producer sent them ---------------------------
    producer = [bytes(tpl)] * 32
    records = per_batch * len(producer)

    def leader() -> float:
        elapsed = seconds_in_new_log(
            root / "leader-0", lambda log: [log.append_records(x) for x in producer]
        )
        return records / elapsed

    def kp_encode_write() -> float:
        path = root / "kp.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        value = b"v" * 1000
        start = time.perf_counter()
        for _ in producer:
            builder = KpBuilder(2, 0, False, -1, -1, -1, 2**30)
            for i in range(per_batch):
                builder.append(i, NOW + i, b"key-%06d" % i, value, [])
            os.write(fd, builder.build())
        elapsed = time.perf_counter() - start
        os.close(fd)
        path.unlink()
        return records / elapsed

    def raw_write() -> float:
        return records / seconds_to_write(root / "raw.bin", producer)

    leader_rounds, raw_rounds = alternate(leader, raw_write)
    rows.append(
        Row(
            "storage",
            "leader append of producer batches (1 KiB records)",
            "rec/s",
            statistics.median(leader_rounds),
            "os.write of the same batches",
            statistics.median(raw_rounds),
            target=0.5,
            notes=(
                f"kafka-python encode + os.write: {median_rate(kp_encode_write):,.0f} rec/s; "
                "per-record checks in the compiled loop"
            ),
            paired_ratio=paired(leader_rounds, raw_rounds),
        )
    )

    # --- idempotent producer batches vs the same batches without a producer id ---------------
    small_recs = [Record(b"v" * 1000, key=b"key-%06d" % i, timestamp=NOW) for i in range(16)]

    def producer_batches(pid: int) -> list[bytes]:
        return [
            bytes(
                MemoryRecords.build(
                    small_recs,
                    producer_id=pid,
                    producer_epoch=0 if pid >= 0 else -1,
                    base_sequence=i * len(small_recs) if pid >= 0 else -1,
                )
            )
            for i in range(2000)
        ]

    idempotent_batches, plain_batches = producer_batches(1), producer_batches(-1)

    def idempotent() -> float:
        elapsed = seconds_in_new_log(
            root / "idem-0", lambda log: [log.append_records(x) for x in idempotent_batches]
        )
        return 2000 / elapsed

    def plain() -> float:
        elapsed = seconds_in_new_log(
            root / "plain-0", lambda log: [log.append_records(x) for x in plain_batches]
        )
        return 2000 / elapsed

    idempotent(), plain()  # warm-up
    ours, raw = alternate(idempotent, plain)
    rows.append(
        Row(
            "storage",
            "idempotent append, 16 KiB producer batches",
            "batch/s",
            statistics.median(ours),
            "same batches, no producer id",
            statistics.median(raw),
            paired_ratio=paired(ours, raw),
            notes="sequence checks, duplicate cache and producer-state updates per batch",
        )
    )

    # --- leader append of Python Record objects -----------------------------------------------
    small = [
        [Record(b"x" * 100, key=b"user-%05d" % (i % 1000), timestamp=NOW) for i in range(1000)]
        for _ in range(50)
    ]

    def append_records() -> float:
        elapsed = seconds_in_new_log(root / "records-0", lambda log: [log.append(x) for x in small])
        return 50_000 / elapsed

    def builder_write(make: Callable[[], AioBuilder | KpBuilder]) -> float:
        path = root / "kp2.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        start = time.perf_counter()
        for chunk in small:
            builder = make()
            for i, r in enumerate(chunk):
                builder.append(i, r.timestamp, r.key, r.value, [])
            os.write(fd, builder.build())
        elapsed = time.perf_counter() - start
        os.close(fd)
        path.unlink()
        return 50_000 / elapsed

    def aio_small() -> float:
        return builder_write(lambda: AioBuilder(2, 0, False, -1, -1, -1, 2**30))

    def kp_small() -> float:
        return builder_write(lambda: KpBuilder(2, 0, False, -1, -1, -1, 2**30))

    ours, aio = alternate(append_records, aio_small)
    rows.append(
        Row(
            "storage",
            "Log.append of Record objects (100 B values, 1k/append)",
            "rec/s",
            statistics.median(ours),
            "aiokafka (C) builder + os.write",
            statistics.median(aio),
            target=1.5,
            paired_ratio=paired(ours, aio),
            extra={"kafka-python builder + os.write": median_rate(kp_small)},
            notes="50 lists of 1,000 Records; ours validates, assigns offsets, builds the batch, "
            "writes it and indexes it as the leader; the baselines only build and write",
        )
    )

    # --- sequential Log.read of a 1 GiB log vs raw reads of the same range ----------------------
    d = root / "read-0"
    log = Log.open(d, BIG, ManualClock(NOW))
    base = 0
    while log.size_in_bytes < 1 << 30:
        log.append_as_follower(at_offset(tpl, per_batch, base))
        base += per_batch
    log.flush()
    log_bytes = log.size_in_bytes
    end = log.log_end_offset
    header = struct.Struct(">qi")

    # The consumer's fetch offsets (each fetch resumes after the last whole batch it got) are
    # worked out once, untimed: walking headers is the consumer's cost, not Log.read's. The raw
    # baseline preads exactly the byte ranges those fetches return.
    fetch_offsets = []
    ranges = []
    offset = 0
    while offset < end:
        fetch_offsets.append(offset)
        fetched = log.read(offset, MIB).records
        assert fetched is not None
        ranges.append((fetched.position, fetched.size))
        data = fetched.read()
        pos = last_pos = 0
        while pos + 12 <= len(data):
            last_pos = pos
            pos += header.unpack_from(data, pos)[1] + 12
        offset = (
            header.unpack_from(data, last_pos)[0]
            + struct.unpack_from(">i", data, last_pos + 23)[0]
            + 1
        )

    def log_read() -> float:
        start = time.perf_counter()
        got = 0
        for offset in fetch_offsets:
            got += len(log.read(offset, MIB).read())
        elapsed = time.perf_counter() - start
        assert got == log_bytes
        return got / elapsed / MIB

    seg_path = log.active_segment.log.path

    def raw_read() -> float:
        fd = os.open(seg_path, os.O_RDONLY)
        start = time.perf_counter()
        got = 0
        for position, size in ranges:
            got += len(os.pread(fd, size, position))
        elapsed = time.perf_counter() - start
        assert got == log_bytes
        os.close(fd)
        return got / elapsed / MIB

    log_read(), raw_read()
    ours, raw = alternate(log_read, raw_read)
    rows.append(
        Row(
            "storage",
            "sequential Log.read of a 1 GiB log, 1 MiB fetches",
            "MB/s",
            statistics.median(ours),
            "os.pread of the same byte ranges",
            statistics.median(raw),
            target=0.8,
            paired_ratio=paired(ours, raw),
            notes="batches of 1,000 records (1 KiB values); ours finds each position through the "
            "offset index and returns the bytes as Kafka's fetch does",
        )
    )
    log.close()
    shutil.rmtree(d)

    # --- recovery of a 1 GiB segment of 16 KiB batches vs a raw header + CRC scan --------------
    small_tpl, small_n = template(1000, 16 * 1024)
    d = root / "recover-0"
    d.mkdir()
    path = d / "00000000000000000000.log"
    with open(path, "wb") as f:
        base = 0
        written = 0
        while written < 1 << 30:
            chunk = at_offset(small_tpl, small_n, base)
            f.write(chunk)
            written += len(chunk)
            base += small_n
    seg_size = written
    crc_struct = struct.Struct(">qiibI")

    def recover() -> float:
        seg = LogSegment(d, 0, BIG.segment_params(), ManualClock(NOW), exists=True)
        start = time.perf_counter()
        result = seg.recover()
        elapsed = time.perf_counter() - start
        assert result.valid_bytes == seg_size and result.truncated_bytes == 0
        seg.close()
        return seg_size / elapsed / MIB

    def raw_scan() -> float:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mm)
        start = time.perf_counter()
        pos, n = 0, 0
        while pos < seg_size:
            _, size, _, _, crc = crc_struct.unpack_from(view, pos)
            if crc32c.crc32c(view[pos + 21 : pos + 12 + size]) != crc:
                raise AssertionError("bad crc")
            pos += size + 12
            n += 1
        elapsed = time.perf_counter() - start
        view.release()
        mm.close()
        return seg_size / elapsed / MIB

    recover(), raw_scan()
    ours, raw = alternate(recover, raw_scan)
    rows.append(
        Row(
            "storage",
            "recovery of a 1 GiB segment of 16 KiB batches",
            "MB/s",
            statistics.median(ours),
            "header + CRC-32C scan",
            statistics.median(raw),
            target=0.5,
            paired_ratio=paired(ours, raw),
            notes="ours: Kafka's LogSegment.recover (CRC, offsets, producer state, index rebuild); "
            "baseline: walk the same batch headers and check each CRC",
        )
    )
    shutil.rmtree(d)

    # --- offset index lookups -----------------------------------------------------------------
    d = root / "index-0"
    log = Log.open(d, LogConfig.from_properties({"index.interval.bytes": 0}), ManualClock(NOW))
    tiny, tiny_n = template(10, 100)
    for i in range(100_000):
        log.append_as_follower(at_offset(tiny, tiny_n, i * tiny_n))
    index = log.active_segment.offset_index
    rng = random.Random(7)
    targets = [rng.randrange(100_000 * tiny_n) for _ in range(100_000)]
    offsets = [index.entry_at(i).offset for i in range(index.entries)]

    def lookups() -> float:
        start = time.perf_counter()
        for t in targets:
            index.lookup(t)
        return len(targets) / (time.perf_counter() - start)

    def bisect_list() -> float:
        start = time.perf_counter()
        for t in targets:
            bisect.bisect_right(offsets, t)
        return len(targets) / (time.perf_counter() - start)

    rows.append(
        Row(
            "storage",
            f"offset index lookups ({index.entries:,} entries)",
            "lookups/s",
            median_rate(lookups),
            "bisect over a Python list",
            median_rate(bisect_list),
            notes="100,000 random target offsets against the memory-mapped .index file",
        )
    )
    log.close()
    return rows
