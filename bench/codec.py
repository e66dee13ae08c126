"""Record codec: encode and decode of 1,000-record v2 batches (10-byte keys, 100-byte values).

Record objects against kafka-python (pure Python; target ratio >= 1.0), and Arrow columns
(``from_arrow`` / ``to_arrow`` on the compiled loop) against aiokafka's C codec (target 1.5)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from bench.harness import Row, interleaved
from kafkalog import CompressionType, MemoryRecords, Record

N = 1000
TS = 1_700_000_000_000


def dataset() -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(42)
    keys = [b"user-%05d" % rng.randrange(100_000) for _ in range(N)]
    values = []
    for i in range(N):
        doc = {"e": rng.choice(["view", "click", "buy"]), "p": rng.randrange(10**6), "i": i}
        raw = json.dumps(doc, separators=(",", ":")).encode()
        values.append((raw + b" " * 100)[:100])
    assert all(len(k) == 10 for k in keys) and all(len(v) == 100 for v in values)
    return keys, values


def run() -> list[Row]:
    keys, values = dataset()
    pairs = list(zip(keys, values, strict=True))
    rows = []
    table = pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array([TS + i for i in range(N)], pa.int64()),
        }
    )
    for codec in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
        cid = int(codec)

        def ours_encode(codec: CompressionType = codec) -> bytes:
            return bytes(
                MemoryRecords.build(
                    [Record(v, k, (), TS + i) for i, (k, v) in enumerate(pairs)], compression=codec
                )
            )

        def kp_encode(cid: int = cid) -> bytes:
            b = KpBuilder(2, cid, False, -1, -1, -1, 2**30)
            for i, (k, v) in enumerate(pairs):
                b.append(i, TS + i, k, v, [])
            return bytes(b.build())

        def aio_encode(cid: int = cid) -> bytes:
            b = AioBuilder(2, cid, False, -1, -1, -1, 2**30)
            for i, (k, v) in enumerate(pairs):
                b.append(i, TS + i, k, v, [])
            return bytes(b.build())

        data = ours_encode()

        def ours_decode(data: bytes = data) -> int:
            n = 0
            for batch in MemoryRecords(data).batches():
                for rec in batch:
                    n += rec.value is not None
            return n

        def kp_decode(data: bytes = data) -> int:
            n = 0
            for rec in KpBatch(data):
                n += rec.value is not None
            return n

        def aio_decode(data: bytes = data) -> int:
            n = 0
            for rec in AioBatch(data):
                n += rec.value is not None
            return n

        assert ours_decode() == kp_decode() == aio_decode() == N

        def columns_encode(codec: CompressionType = codec, table: pa.Table = table) -> bytes:
            return bytes(MemoryRecords.from_arrow(table, compression=codec))

        def columns_decode(data: bytes = data) -> int:
            values = MemoryRecords(data).to_arrow(include_headers=False).column("value")
            return len(values) - values.null_count

        assert columns_decode() == N
        assert list(MemoryRecords(columns_encode()).records()) == list(
            MemoryRecords(data).records()
        )
        name = codec.kafka_name
        # (what, ours, baseline name and fn, the other library's name and fn, target)
        cases = [
            ("encode", ours_encode, "kafka-python", kp_encode, "aiokafka (C)", aio_encode, 1.0),
            ("decode", ours_decode, "kafka-python", kp_decode, "aiokafka (C)", aio_decode, 1.0),
            ("encode", columns_encode, "aiokafka (C)", aio_encode, "kafka-python", kp_encode, 1.5),
            ("decode", columns_decode, "aiokafka (C)", aio_decode, "kafka-python", kp_decode, 1.5),
        ]
        for op, ours, base_name, base, other_name, other, target in cases:
            (ours_rate, base_rate, other_rate), ratios = interleaved([ours, base, other], N)
            columnar = ours in (columns_encode, columns_decode)
            rows.append(
                Row(
                    "codec",
                    f"{op} 1k-record batch{' as Arrow columns' if columnar else ''}, {name}",
                    "rec/s",
                    ours_rate,
                    base_name,
                    base_rate,
                    target=target,
                    extra={other_name: other_rate},
                    paired_ratio=ratios[0],
                    notes="from_arrow / to_arrow on the compiled loop" if columnar else "",
                )
            )
    return rows
