"""One writer for Kafka messages whose layout is a schema: the coordinators' records and the
consumer protocol they embed, from the same generated tables the reader walks.

Why: a record a coordinator writes must be the bytes Kafka's generated serializer writes for
that version (KIP-482's compact lengths and tagged fields in flexible versions, int16/int32
lengths before), or a Kafka broker taking the directory over misreads it. Writing from the
table the reader decodes with -- Kafka's own JSON schemas, generated -- leaves one
description of each format instead of a hand-packed writer beside a hand-copied reader.
Refuses: values of the wrong type or out of range (a ValueError from ``struct`` names the
field), and versions the schema does not define.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, cast

from kafkalog.errors import InvalidArgumentError
from kafkalog.records.coordinator_schemas import COORDINATOR_SCHEMAS
from kafkalog.records.schema_reader import FIXED, Field
from kafkalog.records.varint import encode_unsigned
from kafkalog.types import uuid_bytes


class SchemaWriter:
    """Writes the fields of a message at one version; ``flexible`` is that version's encoding."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()

    def _length(self, n: int | None, array: bool) -> None:
        if self.flexible:
            self.out += encode_unsigned(0 if n is None else n + 1)
        else:
            size = -1 if n is None else n
            self.out += FIXED["int32" if array else "int16"].pack(size)

    def value(self, name: str, kind: Any, version: int, value: Any) -> None:
        if isinstance(kind, dict):  # one struct, a nullable one after its presence byte
            if kind["nullable"]:
                self.out += FIXED["int8"].pack(-1 if value is None else 1)
            elif value is None:
                raise InvalidArgumentError(f"{name} may not be null")
            if value is not None:
                self.struct(kind["struct"], version, value)
        elif isinstance(kind, tuple):  # an array of structs
            self._length(None if value is None else len(value), True)
            for item in value or ():
                self.struct(kind, version, item)
        elif kind == "string":
            raw = None if value is None else str(value).encode("utf-8")
            self._length(None if raw is None else len(raw), False)
            self.out += raw or b""
        elif kind == "bytes":
            self._length(None if value is None else len(value), True)
            self.out += value or b""
        elif kind == "uuid":
            self.out += uuid_bytes(value)
        elif kind == "bool":
            self.out.append(1 if value else 0)
        elif isinstance(kind, str) and kind.startswith("[]"):
            self._length(None if value is None else len(value), True)
            for item in value or ():
                self.value(name, kind[2:], version, item)
        else:
            try:
                self.out += FIXED[kind].pack(value)
            except struct.error as err:
                raise InvalidArgumentError(f"{name}: {value!r} is not a {kind}: {err}") from err

    def struct(self, fields: tuple[Field, ...], version: int, values: Mapping[str, Any]) -> None:
        """The fields ``version`` has, each from ``values`` (its default where absent); a
        tagged field is written only when it differs from its default, as Kafka's generated
        serializers do."""
        tagged: list[tuple[int, bytes]] = []
        for name, kind, first, last, tag, default in fields:
            if version < first or (last is not None and version > last):
                continue
            value = values.get(name, default)
            if tag is None:
                self.value(name, kind, version, value)
            elif isinstance(kind, dict):
                # a tagged struct: Kafka's generated code compares it with an empty struct,
                # so a null one is written (presence varint 0) and a present one after 1
                inner = SchemaWriter(self.flexible)
                inner.out.append(0 if value is None else 1)
                if value is not None:
                    inner.struct(kind["struct"], version, value)
                tagged.append((tag, bytes(inner.out)))
            elif value != default:
                inner = SchemaWriter(self.flexible)
                inner.value(name, kind, version, value)
                tagged.append((tag, bytes(inner.out)))
        if self.flexible:
            self.out += encode_unsigned(len(tagged))
            for tag, data in sorted(tagged):
                self.out += encode_unsigned(tag) + encode_unsigned(len(data)) + data


def _schema(name: str, version: int) -> tuple[tuple[Field, ...], bool]:
    _key, valid, first_flexible, fields = COORDINATOR_SCHEMAS[name]
    low, high = cast("tuple[int, int | None]", valid)
    if not low <= version <= (version if high is None else high):
        raise InvalidArgumentError(f"{name} has no version {version} (versions {low}-{high})")
    flexible = isinstance(first_flexible, int) and version >= first_flexible
    return cast("tuple[Field, ...]", fields), flexible


def encode_versioned(name: str, version: int, values: Mapping[str, Any]) -> bytes:
    """``name`` at ``version``: an int16 version, then the fields (a coordinator record's
    value, or the consumer protocol's subscription and assignment)."""
    fields, flexible = _schema(name, version)
    writer = SchemaWriter(flexible)
    writer.out += FIXED["int16"].pack(version)
    writer.struct(fields, version, values)
    return bytes(writer.out)


def encode_key(name: str, values: Mapping[str, Any]) -> bytes:
    """A coordinator record's key: its record type (the schema's apiKey), then the fields."""
    record_type = COORDINATOR_SCHEMAS[name][0]
    assert isinstance(record_type, int), f"{name} is not a coordinator record key"
    fields, flexible = _schema(name, 0)
    writer = SchemaWriter(flexible)
    writer.out += FIXED["int16"].pack(record_type)
    writer.struct(fields, 0, values)
    return bytes(writer.out)
