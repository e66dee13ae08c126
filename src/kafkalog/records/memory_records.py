"""MemoryRecords: batches of any magic in a buffer, and the one-call builder.

Why: the public face of the record layer, named after Kafka's class. Wraps any bytes-like object
without copying, iterates batches through the one scanner, and builds v0/v1/v2 data. Refuses:
I/O; silently serving a batch that fails its CRC (a damaged batch raises CorruptRecordError; a
partial batch at the end is not returned, as in Kafka).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from kafkalog.errors import InvalidArgumentError, InvalidRecordError
from kafkalog.records.builder import RecordBatchBuilder
from kafkalog.records.legacy import build_legacy
from kafkalog.records.record import Record
from kafkalog.records.scanner import AnyBatch, BatchScanner
from kafkalog.types import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    CompressionType,
    TimestampType,
    check_int,
    check_offset,
)

if TYPE_CHECKING:
    import pyarrow as pa

Buffer = bytes | bytearray | memoryview


class MemoryRecords:
    """A sequence of record batches held in memory (a view, never a copy of the caller's buffer).

    Immutable through this interface; safe to read from several threads.
    """

    __slots__ = ("_view",)

    def __init__(self, buffer: Buffer) -> None:
        try:
            view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        except TypeError as err:
            raise InvalidArgumentError(
                f"MemoryRecords needs a bytes-like buffer, not {type(buffer).__name__}"
            ) from err
        self._view = view.cast("B") if view.format != "B" or view.ndim != 1 else view

    @classmethod
    def build(
        cls,
        records: Iterable[Record],
        *,
        magic: int = 2,
        compression: CompressionType | str | int | None = CompressionType.NONE,
        compression_level: int | None = None,
        base_offset: int = 0,
        timestamp_type: TimestampType | str = TimestampType.CREATE_TIME,
        log_append_time: int | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        partition_leader_epoch: int = -1,
    ) -> MemoryRecords:
        """Encode ``records`` as one v2 batch, or as v0/v1 messages (one wrapper if compressed).

        Record offsets are ``base_offset`` + index; a record whose ``offset`` is set (>= 0) keeps
        it (strictly increasing, as in compacted data). Timestamps of ``None`` are written as -1.
        """
        check_offset("base_offset", base_offset)
        check_int("magic", magic, 0, 2)
        check_int("producer_id", producer_id, -1, INT64_MAX)
        check_int("producer_epoch", producer_epoch, -1, INT16_MAX)
        check_int("base_sequence", base_sequence, -1, INT32_MAX)
        check_int("partition_leader_epoch", partition_leader_epoch, -1, INT32_MAX)
        if log_append_time is not None:
            check_int("log_append_time", log_append_time, -1, INT64_MAX)
        codec = CompressionType.parse(compression)
        ts_type = TimestampType.parse(timestamp_type)
        if magic in (0, 1):
            return cls(
                build_legacy(
                    records if isinstance(records, Sequence) else list(records),
                    magic=magic,
                    compression_type=codec,
                    base_offset=base_offset,
                    timestamp_type=ts_type,
                    log_append_time=log_append_time,
                    compression_level=compression_level,
                )
            )
        if magic != 2:
            raise InvalidRecordError(f"magic must be 0, 1 or 2, not {magic}")
        builder = RecordBatchBuilder(
            compression=codec,
            compression_level=compression_level,
            timestamp_type=ts_type,
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
            partition_leader_epoch=partition_leader_epoch,
            log_append_time=log_append_time,
        )
        builder.append_records(records if isinstance(records, list | tuple) else list(records))
        return cls(builder.build())

    @classmethod
    def from_arrow(
        cls,
        data: pa.Table | pa.RecordBatch,
        *,
        compression: CompressionType | str | int | None = CompressionType.NONE,
        compression_level: int | None = None,
        base_offset: int = 0,
        batch_size: int = 1 << 20,
    ) -> MemoryRecords:
        """Encode the rows of an Arrow table as v2 batches of at most ``batch_size`` bytes of
        records each: a ``value`` column (binary or string) and optional ``key``, ``timestamp``
        (ms or an Arrow timestamp) and ``headers`` (list of struct<key: string, value:
        binary>). Offsets run from ``base_offset``; a null timestamp is written as -1."""
        # imported on use: pyarrow stays off the import path of `import kafkalog`
        from kafkalog.records.columnar_encode import encode_batches, record_columns  # noqa: PLC0415

        codec = CompressionType.parse(compression)
        if base_offset < 0:
            raise InvalidRecordError(f"base offset must be >= 0, not {base_offset}")
        batches = encode_batches(
            record_columns(data),
            compression=codec,
            compression_level=compression_level,
            base_offset=base_offset,
            batch_size=batch_size,
        )
        return cls(b"".join(batches))

    def to_arrow(self, *, include_headers: bool = True, include_control: bool = False) -> pa.Table:
        """The records as an Arrow table: offset, timestamp (ms, UTC), timestampType, key,
        value and headers (null when a record has none). Control records appear only when
        asked. Damage raises CorruptRecordError, as ``batches()`` does."""
        from kafkalog.records.columnar import batches_to_table  # noqa: PLC0415

        return batches_to_table(
            self.batches(), include_headers=include_headers, include_control=include_control
        )

    @property
    def buffer(self) -> memoryview:
        return self._view

    @property
    def size_in_bytes(self) -> int:
        return len(self._view)

    def __len__(self) -> int:
        return len(self._view)

    def __bytes__(self) -> bytes:
        return bytes(self._view)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryRecords):
            return NotImplemented
        return self._view == other._view

    __hash__ = None  # type: ignore[assignment]

    def scan(self, *, verify_crc: bool = True, deep: bool = False) -> BatchScanner:
        """A scanner over the buffer that reports (rather than raises) damage."""
        return BatchScanner(self._view, verify_crc=verify_crc, deep=deep)

    def batches(self, *, verify_crc: bool = True) -> Iterator[AnyBatch]:
        """Every complete batch; damage raises CorruptRecordError, a partial tail is skipped."""
        scanner = BatchScanner(self._view, verify_crc=verify_crc)
        yield from scanner
        if scanner.error is not None:
            raise scanner.error

    def records(self) -> Iterator[Record]:
        """Every record of every batch (control records included; see ``batch.is_control``)."""
        for batch in self.batches():
            yield from batch

    def first_batch(self) -> AnyBatch | None:
        """The first complete batch, or None."""
        for batch in self.batches():
            return batch
        return None

    def __repr__(self) -> str:
        return f"MemoryRecords({len(self._view)} bytes)"
