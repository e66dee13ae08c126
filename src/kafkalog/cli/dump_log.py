"""``kafkalog dump-log``: org.apache.kafka.tools.DumpLogSegments, line for line.

Why: scripts written against ``kafka-dump-log.sh`` parse its exact text; kafkalog's dump must
print the same lines for the same files (and a JSON form for new scripts). Each dumper returns
plain lines plus the error report Kafka prints to stderr after all files. It reads files through
the storage layer and walks batches with the one scanner. Refuses: modifying any file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.cli.dump_decoders import API_PACKAGE, STRING_DECODER, java_utf8, key_and_payload
from kafkalog.cli.kraft_records import kraft_control_text
from kafkalog.cli.metadata_decoder import metadata_json
from kafkalog.cli.segment_walk import SegmentWalk
from kafkalog.errors import CorruptRecordError, InvalidArgumentError
from kafkalog.records import AnyBatch, Record, coordinator, remote_log_metadata
from kafkalog.records.batch import RecordBatch
from kafkalog.records.control import decode_control_key, decode_end_txn_marker
from kafkalog.records.legacy import LegacyRecord
from kafkalog.records.partitioner import java_string_hash
from kafkalog.storage import filenames as fn
from kafkalog.types import INT32_MAX, ControlRecordType, TimestampType

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024


@dataclass
class DumpOptions:
    deep_iteration: bool = False
    print_data_log: bool = False
    skip_record_metadata: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = INT32_MAX
    max_bytes_given: bool = False
    json: bool = False
    # "offsets" (--offsets-decoder), "transactions" (--transaction-log-decoder),
    # "cluster-metadata" (--cluster-metadata-decoder), "share-group-state"
    # (--share-group-state-decoder) or "remote-log-metadata" (--remote-log-metadata-decoder)
    decoder: str | None = None
    key_decoder: str | None = None  # --key-decoder-class / --value-decoder-class: Kafka's names
    value_decoder: str | None = None
    # whose DumpLogSegments output to match where Kafka's releases differ (--kafka-version)
    kafka_version: tuple[int, int] = (4, 3)

    @property
    def prints_data(self) -> bool:
        return self.print_data_log or self.decoder is not None or self.decoder_classes

    @property
    def decoder_classes(self) -> bool:
        return self.key_decoder is not None or self.value_decoder is not None

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.prints_data


class Output:
    """Where stdout lines go: straight to ``write`` as they are made (so a dump of a large
    segment starts at once and holds no more than a chunk), or kept in ``lines``."""

    def __init__(self, write: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self._write = write

    def append(self, line: str) -> None:
        if self._write is None:
            self.lines.append(line)
        else:
            self._write(line)


@dataclass
class DumpReport:
    """What Kafka prints after all files: index mismatches and non-consecutive offsets."""

    out: Output = field(default_factory=Output)
    err: list[str] = field(default_factory=list)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def finish(self, kafka_version: tuple[int, int] = (4, 3)) -> None:
        """Kafka 4.x's Java tool keeps its reports in HashMaps keyed by path (printed in hash
        order) with TreeMaps per file; 3.9's prepended to lists, so pairs print newest first."""
        if kafka_version >= (4, 0):
            self._finish_4x()
            return
        for path, pairs in self.index_mismatches.items():
            self.err.append(f"Mismatches in :{path}")
            self.err += [f"  Index offset: {a}, log offset: {b}" for a, b in reversed(pairs)]
        for path, pairs in self.time_mismatches.items():
            self.err.append(f"Found timestamp mismatch in :{path}")
            self.err += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in reversed(pairs)]
        for path, pairs in self.time_out_of_order.items():
            self.err.append(f"Found out of order timestamp in :{path}")
            self.err += [
                f"  Index timestamp: {a}, Previously indexed timestamp: {b}"
                for a, b in reversed(pairs)
            ]
        if any(self.time_not_found.values()):
            self.err.append("The following indexed offsets are not found in the log.")
            for pairs in self.time_not_found.values():
                self.err += [f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs]
        for path, pairs in self.non_consecutive.items():
            self.err.append(f"Non-consecutive offsets in {path}")
            self.err += [f"  {a} is followed by {b}" for a, b in reversed(pairs)]

    def _finish_4x(self) -> None:
        err = self.err
        for path in java_hashmap_order(self.index_mismatches):
            err.append(f"Mismatches in :{path}")
            by_offset = dict(self.index_mismatches[path])  # a TreeMap in reverse order
            err += [
                f"  Index offset: {a}, log offset: {by_offset[a]}" for a in sorted(by_offset)[::-1]
            ]
        for path in java_hashmap_order(self.time_mismatches):
            err.append(f"Found timestamp mismatch in :{path}")
            err += [
                f"  Index timestamp: {a}, log timestamp: {b}" for a, b in self.time_mismatches[path]
            ]
        for path in java_hashmap_order(self.time_out_of_order):
            err.append(f"Found out of order timestamp in :{path}")
            err += [
                f"  Index timestamp: {a}, Previously indexed timestamp: {b}"
                for a, b in self.time_out_of_order[path]
            ]
        for path in java_hashmap_order(self.time_not_found):
            err.append(f"The following indexed offsets are not found in :{path}")
            err += [
                f"Indexed offset: {a}, found log offset: {b}" for a, b in self.time_not_found[path]
            ]
        for path in java_hashmap_order(self.non_consecutive):
            err.append(f"Non-consecutive offsets in {path}")
            following = dict(self.non_consecutive[path])  # a TreeMap by the earlier offset
            err += [f"  {a} is followed by {following[a]}" for a in sorted(following)]


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a java.util.HashMap<String, ?> filled with ``keys`` in order by
    computeIfAbsent: by bucket (hash ^ hash >>> 16, masked to the table size the map grew to),
    then newest first, as computeIfAbsent puts a new node at the head of its bin and a resize
    keeps each bin's order. The table doubles when an insertion finds size > 0.75 capacity."""
    keys = list(keys)
    capacity = 16
    while len(keys) - 1 > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF  # >>> below is Java's unsigned shift
        return (h ^ (h >> 16)) & (capacity - 1)

    return [k for _, k in sorted(enumerate(keys), key=lambda ik: (bucket(ik[1]), -ik[0]))]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _ts_name(batch: AnyBatch) -> str:
    return {
        TimestampType.CREATE_TIME: "CreateTime",
        TimestampType.LOG_APPEND_TIME: "LogAppendTime",
    }.get(batch.timestamp_type, "NoTimestampType")


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None or value < 0 else f"OptionalLong[{value}]"


def batch_line(batch: AnyBatch, position: int) -> str:
    if isinstance(batch, RecordBatch):
        h = batch.header
        head = (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
            f"deleteHorizonMs: {_optional_long(h.delete_horizon_ms)}"
        )
        magic = 2
    else:
        head = f"offset: {batch.last_offset}"
        magic = batch.magic
    return (
        f"{head} position: {position} {_ts_name(batch)}: {batch.max_timestamp} "
        f"size: {batch.size_in_bytes} magic: {magic} "
        f"compresscodec: {batch.compression.name.lower()} crc: {batch.crc} "
        f"isvalid: {_bool(batch.is_valid())}"
    )


def _text(data: bytes | None) -> str:
    return "" if data is None else java_utf8(data)


def record_line(batch: AnyBatch, record: Record, options: DumpOptions) -> str:
    parts: list[str] = []
    v2 = isinstance(batch, RecordBatch)
    if not options.skip_record_metadata:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        ts = record.timestamp if record.timestamp is not None else -1
        parts.append(
            f"| offset: {record.offset} {_ts_name(batch)}: {ts} "
            f"keySize: {key_size} valueSize: {value_size}"
        )
        if isinstance(batch, RecordBatch):
            base_seq = batch.base_sequence
            seq = -1 if base_seq < 0 else (base_seq + record.offset - batch.base_offset) % 2**31
            keys = ",".join(k for k, _ in record.headers)
            parts.append(f" sequence: {seq} headerKeys: [{keys}]")
        elif isinstance(record, LegacyRecord):  # an inner message: its own CRC and validity
            brace = "}" if options.kafka_version < (4, 0) else ""  # 3.x's Scala stray brace
            parts.append(f" isValid: {_bool(record.valid)} crc: {record.crc}{brace}")
    if v2 and batch.is_control:
        if options.skip_record_metadata:  # Kafka prints a control record's type as metadata
            return "".join(parts)
        kind = decode_control_key(record.key).type
        # 3.9 printed LeaderChange as a bare control type; the other KRaft ones as JSON
        kraft = None
        if kind is not ControlRecordType.LEADER_CHANGE or options.kafka_version >= (4, 0):
            kraft = kraft_control_text(kind, record.value)
        if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            marker = decode_end_txn_marker(record.key, record.value)
            parts.append(
                f" endTxnMarker: {marker.type.name} coordinatorEpoch: {marker.coordinator_epoch}"
            )
        elif kraft is not None:
            parts.append(f" {kraft}")
        else:
            parts.append(f" controlType: {kind.name}({decode_control_key(record.key).type_id})")
    elif options.prints_data:
        key, payload = _parse(record, options)
        if options.kafka_version >= (4, 0):
            # 4.0's DumpLogSegments puts the indent before whichever of the two comes first
            prefix = "| " if options.skip_record_metadata else " "
            if key is not None:
                parts.append(f"{prefix}key: {key}")
                prefix = " "
            if payload is not None:
                parts.append(f"{prefix}payload: {payload}")
        else:
            if key is not None:
                parts.append(f"{'|' if options.skip_record_metadata else ''} key: {key}")
            if payload is not None:
                parts.append(f" payload: {payload}")
    return "".join(parts)


def _parse(record: Record, options: DumpOptions) -> tuple[str | None, str | None]:
    """Key and payload as DumpLogSegments' message parser for the chosen decoder shows them."""
    if options.decoder is None:
        key_class = options.key_decoder or STRING_DECODER
        return key_and_payload(record.key, record.value, record.offset, key_class,
                               options.value_decoder or STRING_DECODER)  # fmt: skip
    if options.decoder == "cluster-metadata":  # no keys: the payload is the whole record
        return None, metadata_json(record.value, record.offset)
    if options.decoder == "remote-log-metadata":  # no keys either: Kafka's toString
        try:
            metadata = remote_log_metadata.decode(record.value or b"")
        except CorruptRecordError as err:
            return None, f"Error at offset {record.offset}, skipping. {err}"
        # Kafka 3.9's toString has no txnIdxEmpty
        modern = options.kafka_version >= (4, 0)
        return None, remote_log_metadata.describe(metadata, txn_index_empty=modern)
    if record.key is None:
        raise InvalidArgumentError(
            f"Failed to decode message at offset {record.offset} using the specified decoder "
            "(message had a missing key)"
        )
    try:
        decoded = coordinator.decode(options.decoder, record.key, record.value)
    except CorruptRecordError as err:
        return f"Error at offset {record.offset}, skipping. {err}", None
    modern = options.kafka_version >= (4, 0)
    if options.decoder == "transactions" and not modern:
        return coordinator.format_transaction_text(decoded)
    key_type = decoded.record_type
    if modern and options.decoder == "offsets" and key_type == 0:
        key_type = 1  # 4.x prints the record's api key; both legacy key versions are type 1
    return coordinator.format_json(decoded, record.offset, key_type)


def _json_batch(batch: AnyBatch, position: int, options: DumpOptions) -> str:
    obj: dict[str, object] = {
        "position": position,
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "size": batch.size_in_bytes,
        "magic": 2 if isinstance(batch, RecordBatch) else batch.magic,
        "compression": batch.compression.name.lower(),
        "timestampType": _ts_name(batch),
        "maxTimestamp": batch.max_timestamp,
        "crc": batch.crc,
        "isValid": batch.is_valid(),
    }
    if isinstance(batch, RecordBatch):
        h = batch.header
        obj.update(
            producerId=h.producer_id,
            producerEpoch=h.producer_epoch,
            baseSequence=h.base_sequence,
            partitionLeaderEpoch=h.partition_leader_epoch,
            isTransactional=h.is_transactional,
            isControl=h.is_control,
            deleteHorizonMs=h.delete_horizon_ms,
        )
    if options.deep:
        obj["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _text(r.key) if options.print_data_log and r.key is not None else None,
                "value": _text(r.value) if options.print_data_log and r.value is not None else None,
                "keySize": -1 if r.key is None else len(r.key),
                "valueSize": -1 if r.value is None else len(r.value),
                "headerKeys": [k for k, _ in r.headers],
            }
            for r in batch.records()
        ]
    return json.dumps(obj, separators=(",", ":"))


def _header_line(name: str) -> str | None:
    """What Kafka prints before a segment's or a KRaft snapshot's batches. A snapshot whose name
    is not ``<end offset>-<epoch>.checkpoint`` (Kafka's tool fails on one) gets no such line."""
    if name.endswith(fn.LOG_FILE_SUFFIX):
        return f"Log starting offset: {fn.offset_from_file_name(name)}"
    if name == "bootstrap.checkpoint":  # KIP-778's bootstrap metadata
        return "KRaft bootstrap snapshot"
    match = _SNAPSHOT_NAME.fullmatch(name)
    if match is None:
        return None
    return f"Snapshot end offset: {int(match[1])}, epoch: {int(match[2])}"


_SNAPSHOT_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")  # Kafka's Snapshots.parse


def dump_log(path: Path, shown: str, options: DumpOptions, report: DumpReport) -> None:
    out = report.out
    if options.kafka_version < (4, 0) and not options.json:  # 3.9 makes its decoders per file
        for name in (options.value_decoder, options.key_decoder):
            if name is not None and name.startswith("kafka.serializer."):
                simple = name.removeprefix("kafka.serializer.")
                out.append(f"{name} is deprecated. Please use {API_PACKAGE}{simple} instead")
    if not options.json:
        header = _header_line(path.name)
        if header is not None:
            out.append(header)
    walk = SegmentWalk(path, options.max_bytes)
    last_offset = -1
    # 4.x's Java port compares the first record with -1 too, so a segment that does not start
    # at offset 0 always reports "-1 is followed by <base>"; 3.9 started comparing after it
    first_is_gap = options.kafka_version >= (4, 0)
    gaps: list[tuple[int, int]] = []
    for position, batch in walk:
        if options.json:
            out.append(_json_batch(batch, position, options))
        else:
            out.append(batch_line(batch, position))
        if options.deep:
            for record in batch.records():
                if (last_offset >= 0 or first_is_gap) and record.offset != last_offset + 1:
                    gaps.append((last_offset, record.offset))
                last_offset = record.offset
                if not options.json:
                    out.append(record_line(batch, record, options))
    remaining = walk.size - walk.valid_end
    if remaining > 0 and not options.max_bytes_given and not options.json:
        out.append(f"Found {remaining} invalid bytes at the end of {path.name}")
    if gaps:
        report.non_consecutive[os.path.abspath(path)] = gaps  # File#getAbsolutePath
