"""The Fetch response frame, written by hand so record bytes can go from the segment file to
the socket with ``sendfile`` (Kafka's zero-copy FileRecords.writeTo).

Why: kio's generated codec takes record bytes as a Python ``bytes``, so every fetched byte
would be read into memory and copied into the frame. This encoder writes everything around
the records (versions 4-12 of FetchResponse.json) and leaves each partition's records as an
``OpenSlice`` -- a descriptor of its own, a position and a size -- that the transport sends
with ``loop.sendfile``. A test holds it byte-equal to kio's encoding for every served version.

Refuses: versions outside 4-12, and reading the slices itself except in ``to_bytes`` (the
sans-IO tests, and transports that cannot ``sendfile``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from kafkalog.errors import KafkaStorageError
from kafkalog.records.varint import encode_unsigned

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error code, high watermark
FIRST_FLEXIBLE = 12


class OpenSlice:
    """Bytes ``[position, position + size)`` of a segment file, through a descriptor this
    object owns (a dup taken while the log was read)."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd, self.position, self.size = fd, position, size

    def read(self) -> bytes:
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:
            raise KafkaStorageError(f"a segment file was cut below {self.position + self.size}")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(slots=True)
class PartitionResponse:
    index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    records: bytes | OpenSlice = b""

    @property
    def records_size(self) -> int:
        r = self.records
        return r.size if isinstance(r, OpenSlice) else len(r)


@dataclass(slots=True)
class TopicResponse:
    name: str
    partitions: list[PartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class FetchResponseData:
    error_code: int
    topics: list[TopicResponse] = field(default_factory=list)
    throttle_ms: int = 0
    session_id: int = 0

    def slices(self) -> Iterator[OpenSlice]:
        for topic in self.topics:
            for p in topic.partitions:
                if isinstance(p.records, OpenSlice):
                    yield p.records

    def close(self) -> None:
        """Release every slice's descriptor (a response dropped or already sent)."""
        for s in self.slices():
            s.close()


class FetchFrame:
    """A size-prefixed response frame as parts: bytes, and slices to send from their files."""

    def __init__(self, parts: list[bytes | OpenSlice], data: FetchResponseData) -> None:
        self.parts = parts
        self._data = data

    def to_bytes(self) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p.read() for p in self.parts)

    def close(self) -> None:
        self._data.close()


def encode_fetch_response(correlation_id: int, version: int, data: FetchResponseData) -> FetchFrame:
    if not 4 <= version <= FIRST_FLEXIBLE:
        raise ValueError(f"Fetch version {version} is not encoded here")
    flexible = version >= FIRST_FLEXIBLE
    parts: list[bytes | OpenSlice] = []
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out += b"\0"  # response header v1: no tagged fields
    out += _I32.pack(data.throttle_ms)
    if version >= 7:
        out += _I16.pack(data.error_code) + _I32.pack(data.session_id)
    _array_length(out, len(data.topics), flexible)
    for topic in data.topics:
        name = topic.name.encode()
        out += encode_unsigned(len(name) + 1) if flexible else _I16.pack(len(name))
        out += name
        _array_length(out, len(topic.partitions), flexible)
        for p in topic.partitions:
            out += _PARTITION_HEAD.pack(p.index, p.error_code, p.high_watermark)
            out += _I64.pack(p.last_stable_offset)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if p.aborted is None:
                out += b"\0" if flexible else _I32.pack(-1)
            else:
                _array_length(out, len(p.aborted), flexible)
                for producer_id, first_offset in p.aborted:
                    out += _I64.pack(producer_id) + _I64.pack(first_offset)
                    if flexible:
                        out += b"\0"
            if version >= 11:
                out += _I32.pack(-1)  # preferred read replica: none
            size = p.records_size
            out += encode_unsigned(size + 1) if flexible else _I32.pack(size)
            if isinstance(p.records, OpenSlice):
                if size:
                    parts.append(bytes(out))
                    parts.append(p.records)
                    out = bytearray()
            else:
                out += p.records
            if flexible:
                out += b"\0"  # partition tagged fields
        if flexible:
            out += b"\0"  # topic tagged fields
    if flexible:
        out += b"\0"  # response tagged fields
    parts.append(bytes(out))
    total = sum(len(p) if isinstance(p, bytes) else p.size for p in parts)
    head = parts[0]
    assert isinstance(head, bytes)  # the header always comes before the first slice
    parts[0] = _I32.pack(total) + head
    return FetchFrame(parts, data)


def _array_length(out: bytearray, n: int, flexible: bool) -> None:
    out += encode_unsigned(n + 1) if flexible else _I32.pack(n)
