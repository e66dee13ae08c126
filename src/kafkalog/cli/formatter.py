"""What ``consume`` prints for a record: Kafka's DefaultMessageFormatter, property for property.

Why: scripts parse kafka-console-consumer's output, so the fields, their order, the separators
and the words for absent things (``NO_TIMESTAMP``, ``NO_HEADERS``, the null literal) are
Kafka's. Keys, values and header values are written as their raw bytes, as Kafka writes them
with no deserializer configured. Refuses: deserializer classes (kafkalog has no JVM to load
them) -- an unknown property is ignored, as Kafka ignores one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkalog.records import Record
from kafkalog.types import TimestampType


def _flag(props: Mapping[str, str], name: str, default: bool) -> bool:
    raw = props.get(name)
    return default if raw is None else raw.strip().lower() == "true"  # Kafka's getBoolProperty


@dataclass(frozen=True)
class MessageFormatter:
    print_timestamp: bool = False
    print_key: bool = False
    print_offset: bool = False
    print_partition: bool = False
    print_headers: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MessageFormatter:
        """Kafka's formatter properties (``print.key=true``, ``key.separator=|`` ...); booleans
        are true when the value is ``true`` in any case, as in Kafka."""
        defaults = cls()

        def text(name: str, default: bytes) -> bytes:
            raw = props.get(name)
            return default if raw is None else raw.encode()

        return cls(
            print_timestamp=_flag(props, "print.timestamp", defaults.print_timestamp),
            print_key=_flag(props, "print.key", defaults.print_key),
            print_offset=_flag(props, "print.offset", defaults.print_offset),
            print_partition=_flag(props, "print.partition", defaults.print_partition),
            print_headers=_flag(props, "print.headers", defaults.print_headers),
            print_value=_flag(props, "print.value", defaults.print_value),
            key_separator=text("key.separator", defaults.key_separator),
            line_separator=text("line.separator", defaults.line_separator),
            headers_separator=text("headers.separator", defaults.headers_separator),
            null_literal=text("null.literal", defaults.null_literal),
        )

    def format(self, record: Record, partition: int, timestamp_type: TimestampType) -> bytes:
        """One record as DefaultMessageFormatter.writeTo writes it, line separator included."""
        fields: list[bytes] = []
        if self.print_timestamp:
            if timestamp_type is TimestampType.NO_TIMESTAMP_TYPE:
                fields.append(b"NO_TIMESTAMP")
            else:
                fields.append(f"{timestamp_type.display_name}:{record.timestamp}".encode())
        if self.print_partition:
            fields.append(b"Partition:%d" % partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            if not record.headers:
                fields.append(b"NO_HEADERS")
            else:
                fields.append(
                    self.headers_separator.join(
                        key.encode() + b":" + (self.null_literal if value is None else value)
                        for key, value in record.headers
                    )
                )
        if self.print_key:
            fields.append(self.null_literal if record.key is None else record.key)
        if self.print_value:
            fields.append(self.null_literal if record.value is None else record.value)
        if not fields:
            return b""  # Kafka writes a line separator only after the last field it prints
        return self.key_separator.join(fields) + self.line_separator
