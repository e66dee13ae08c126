"""``--key-decoder-class`` / ``--value-decoder-class``: Kafka's built-in dump decoders.

Why: kafka-dump-log prints keys and payloads through a Decoder class, StringDecoder unless
told otherwise; scripts that pass Kafka's IntegerDecoder or LongDecoder for numeric keys must
get the same numbers here. The names are Kafka's (``org.apache.kafka.tools.api.*``, and 3.x's
``kafka.serializer.*``). Refuses: any other class (kafkalog has no JVM to load one), and
DefaultDecoder, whose output is a Java array's identity (``[B@1b6d3586``), not its bytes.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

from kafkalog.errors import InvalidArgumentError

API_PACKAGE = "org.apache.kafka.tools.api."
STRING_DECODER = API_PACKAGE + "StringDecoder"
_PACKAGES = (API_PACKAGE, "kafka.serializer.")

Decoder = Callable[[bytes, int, str], str]  # (bytes, offset, what) -> the printed text


def _java_replace(err: UnicodeError) -> tuple[str, int]:
    """Replace malformed UTF-8 as Java's decoder does (``new String(bytes, UTF_8)``): as
    Python's "replace" but for a UTF-16 surrogate's three-byte form (ED A0-BF ..), which Java
    replaces whole, with one U+FFFD for the lead, the second byte and a third that continues
    it, where Python gives one per byte. Found by comparing random byte strings with Java 17;
    everywhere else the two agree."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    data, at = err.object, err.start
    if data[at] == 0xED and at + 1 < len(data) and 0xA0 <= data[at + 1] <= 0xBF:
        end = at + 3 if at + 2 < len(data) and 0x80 <= data[at + 2] <= 0xBF else at + 2
        return "\ufffd", end
    return "\ufffd", err.end


codecs.register_error("kafkalog.java-replace", _java_replace)


def java_utf8(data: bytes) -> str:
    """``data`` as Kafka's tools print it: Java's UTF-8 decoding, malformed bytes replaced."""
    return data.decode("utf-8", errors="kafkalog.java-replace")


def _string(data: bytes, offset: int, what: str) -> str:
    return java_utf8(data)


def _number(size: int, name: str) -> Decoder:
    def decode(data: bytes, offset: int, what: str) -> str:
        if len(data) < size:  # ByteBuffer.getInt/getLong: a BufferUnderflowException in Kafka
            raise InvalidArgumentError(
                f"{name} cannot decode the {what} at offset {offset}: {len(data)} byte(s), "
                f"not {size}"
            )
        return str(int.from_bytes(data[:size], "big", signed=True))

    return decode


_DECODERS: dict[str, Decoder] = {
    "StringDecoder": _string,
    "IntegerDecoder": _number(4, "IntegerDecoder"),
    "LongDecoder": _number(8, "LongDecoder"),
}


def decoder_for(option: str, class_name: str) -> Decoder:
    """The decoder Kafka's class name stands for; InvalidArgumentError naming the option for
    any other."""
    for package in _PACKAGES:
        simple = class_name.removeprefix(package)
        if simple != class_name and simple in _DECODERS:
            return _DECODERS[simple]
    raise InvalidArgumentError(
        f"{option} {class_name}: kafkalog runs Kafka's StringDecoder, IntegerDecoder and "
        f"LongDecoder ({_PACKAGES[0]}*), and cannot load other classes"
    )


def key_and_payload(
    key: bytes | None, value: bytes | None, offset: int, key_class: str, value_class: str
) -> tuple[str | None, str | None]:
    """What DecoderMessageParser prints: each present field through its decoder."""
    return (
        None if key is None else decoder_for("--key-decoder-class", key_class)(key, offset, "key"),
        None
        if value is None
        else decoder_for("--value-decoder-class", value_class)(value, offset, "value"),
    )
