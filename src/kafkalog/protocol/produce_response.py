"""The Produce response frame, written by hand (Kafka's ProduceResponse.json, versions 3 to 12),
and the plain objects the broker builds it from.

Why: every acknowledged batch costs one. Written through kio's generic entity writer, a frame
of a few dozen bytes took about a seventh of the broker's GIL time under one 1 KiB producer
(py-spy on ``kafkalog serve``, one partition); building kio's frozen response objects took
most of another tenth. The handler builds ``ProduceAnswer`` objects instead (slotted, mutable
dataclasses with kio's field names, so ``dataclasses.replace`` and every reader of a kio
response read them the same); this writer takes either. Tests check its bytes against kio's
for every version on generated responses, and the plain objects' bytes against kio's.
Refuses: what the broker never sets (a current-leader or node-endpoint tagged field) and other
versions: it answers None for a kio response and kio writes the frame.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass
from typing import Any

from kafkalog.records.varint import encode_unsigned

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_PARTITION = struct.Struct(">ihq")  # index, error code, base offset
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)
FIRST, LAST, FIRST_FLEXIBLE = 3, 12, 9


@dataclass(slots=True)
class RecordErrorAnswer:
    """A record's error in a partition's answer (BatchIndexAndErrorMessage, KIP-467)."""

    batch_index: int
    batch_index_error_message: str | None


@dataclass(frozen=True, slots=True)
class LeaderAnswer:
    leader_id: int = -1
    leader_epoch: int = -1


NO_LEADER = LeaderAnswer()  # the broker sets no current leader


@dataclass(slots=True)
class PartitionAnswer:
    """PartitionProduceResponse's fields."""

    index: int
    error_code: int
    base_offset: int = -1
    log_append_time: datetime.datetime | None = None
    log_start_offset: int = -1
    record_errors: tuple[RecordErrorAnswer, ...] = ()
    error_message: str | None = None
    current_leader: LeaderAnswer = NO_LEADER


@dataclass(slots=True)
class TopicAnswer:
    """TopicProduceResponse's fields."""

    name: str
    partition_responses: tuple[PartitionAnswer, ...]


@dataclass(slots=True)
class ProduceAnswer:
    """ProduceResponse's fields (no node endpoints: this broker leads every partition)."""

    responses: tuple[TopicAnswer, ...]
    throttle_time: datetime.timedelta
    node_endpoints: tuple[Any, ...] = ()


def _length(out: bytearray, n: int, flexible: bool) -> None:
    out += encode_unsigned(n + 1) if flexible else _I32.pack(n)


def _string(out: bytearray, text: str | None, flexible: bool) -> None:
    if text is None:
        out += b"\0" if flexible else _I16.pack(-1)
        return
    data = text.encode()
    out += encode_unsigned(len(data) + 1) if flexible else _I16.pack(len(data))
    out += data


def encode_produce_response(version: int, correlation_id: int, body: Any) -> bytes | None:
    """The size-prefixed frame of ``body`` (a ProduceAnswer, or a kio ProduceResponse of
    ``version``), or None when kio must write it."""
    if not FIRST <= version <= LAST:
        return None
    flexible = version >= FIRST_FLEXIBLE
    if version >= 10 and body.node_endpoints:
        return None
    out = bytearray(4)
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\0"  # the response header's tagged fields
    _length(out, len(body.responses), flexible)
    for topic in body.responses:
        _string(out, topic.name, flexible)
        _length(out, len(topic.partition_responses), flexible)
        for part in topic.partition_responses:
            out += _PARTITION.pack(part.index, part.error_code, part.base_offset)
            stamp = part.log_append_time
            out += _I64.pack(-1 if stamp is None else (stamp - _EPOCH) // _MS)
            if version >= 5:
                out += _I64.pack(part.log_start_offset)
            if version >= 8:
                _length(out, len(part.record_errors), flexible)
                for error in part.record_errors:
                    out += _I32.pack(error.batch_index)
                    _string(out, error.batch_index_error_message, flexible)
                    if flexible:
                        out += b"\0"
                _string(out, part.error_message, flexible)
            if flexible:
                if version >= 10 and (
                    part.current_leader.leader_id != -1 or part.current_leader.leader_epoch != -1
                ):
                    return None
                out += b"\0"
        if flexible:
            out += b"\0"
    out += _I32.pack(body.throttle_time // _MS)
    if flexible:
        out += b"\0"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
