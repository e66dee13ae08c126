"""One reader for Kafka messages whose layout is a schema: the coordinators' records
(``__consumer_offsets``, ``__transaction_state``) and KRaft metadata records.

Why: these are Kafka's generated message formats (KIP-482): fixed-size big-endian numbers,
int16/int32 lengths in old versions and compact (length + 1) ones in flexible versions, and
flexible structs ending in a tagged-field section. Walking them from a schema table, in one
place, keeps every decoder's reading (and its errors) the same. Refuses: guessing past the end
of the data: a field that overruns it is a CorruptRecordError naming what was read.
"""

from __future__ import annotations

import struct
from typing import Any

from kafkalog.errors import CorruptRecordError
from kafkalog.types import uuid_string

# A field: JSON name, type, first version, last version (None: open), tag (None: not tagged),
# default. A struct array's type is a tuple of fields, a single struct's {"struct": fields,
# "nullable": whether a presence byte comes first}.
Field = tuple[str, Any, int, int | None, int | None, Any]

FIXED = {
    "int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"), "uint16": struct.Struct(">H"), "float64": struct.Struct(">d"),
}  # fmt: skip


class SchemaReader:
    """Reads fields of a message at one version; ``flexible`` is that version's encoding."""

    def __init__(self, data: bytes, flexible: bool, what: str = "a coordinator record") -> None:
        self.data, self.pos, self.flexible, self.what = data, 0, flexible, what

    def fixed(self, kind: str) -> Any:
        """A fixed-size number (``int8`` ... ``int64``, ``uint16``, ``float64``)."""
        s = FIXED[kind]
        if self.pos + s.size > len(self.data):
            raise CorruptRecordError(f"{self.what} ends inside a {kind}")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return value

    def uvarint(self) -> int:
        """An unsigned varint of at most five bytes."""
        shift = value = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise CorruptRecordError(f"{self.what} has a bad unsigned varint")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def length(self, array: bool) -> int:
        """A length: compact in flexible versions, int32 (arrays, bytes) or int16 (strings)
        before; -1 is null."""
        if self.flexible:
            return self.uvarint() - 1
        return int(self.fixed("int32" if array else "int16"))

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what} field of {n} bytes overruns it")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def value(self, kind: Any, version: int) -> Any:
        """One field's value; a tuple of fields is an array of structs, ``{"struct": fields}``
        one struct: a nullable one after its presence byte (-1, or 0 in a tagged field: null),
        as Kafka's generated code writes it, any other one inline."""
        if isinstance(kind, dict):
            if kind["nullable"] and self.fixed("int8") <= 0:
                return None
            return self.struct(kind["struct"], version)
        if isinstance(kind, tuple):
            n = self.length(True)
            return None if n < 0 else [self.struct(kind, version) for _ in range(n)]
        if kind == "string":
            n = self.length(False)
            return None if n < 0 else self.take(n).decode("utf-8", "replace")
        if kind == "uuid":
            return uuid_string(self.take(16))
        if kind == "bool":
            return self.take(1)[0] != 0
        if kind == "bytes":
            n = self.length(True)
            return None if n < 0 else self.take(n)
        if isinstance(kind, str) and kind.startswith("[]"):
            n = self.length(True)
            return None if n < 0 else [self.value(kind[2:], version) for _ in range(n)]
        return self.fixed(kind)

    def struct(self, fields: tuple[Field, ...], version: int) -> dict[str, Any]:
        """The fields of ``version`` by name, in schema order, tagged ones at their default
        unless the tagged section carries them; as the generated JSON converters write it,
        a tagged field that holds its default is left out."""
        out: dict[str, Any] = {}
        tagged: dict[int, Field] = {}
        for f in fields:
            name, kind, first, last, tag, default = f
            if version < first or (last is not None and version > last):
                continue
            if tag is not None:
                tagged[tag] = f
                out[name] = default
            else:
                out[name] = self.value(kind, version)
        if self.flexible:
            for _ in range(self.uvarint()):
                tag, size = self.uvarint(), self.uvarint()
                if tag in tagged:
                    # as Kafka's generated readers do: a known tag's value is read as its type
                    # says, whatever size came before it; only an unknown one is skipped whole
                    out[tagged[tag][0]] = self.value(tagged[tag][1], version)
                else:
                    self.take(size)
        # ...but a tagged struct is left out only when empty: Kafka's converters compare it
        # with a new struct, so a null one is printed
        return {
            name: v
            for name, v in out.items()
            if not any(
                f[0] == name and f[4] is not None and f[5] == v and not isinstance(f[1], dict)
                for f in fields
            )
        }
