"""``--key-decoder-class`` / ``--value-decoder-class``: Kafka's built-in dump decoders.

Why: kafka-dump-log prints keys and payloads through a Decoder class, StringDecoder unless
told otherwise; scripts that pass Kafka's IntegerDecoder or LongDecoder for numeric keys must
get the same numbers here. The names are Kafka's (``org.apache.kafka.tools.api.*``, and 3.x's
``kafka.serializer.*``). Refuses: any other class (kafkalog has no JVM to load one), and
DefaultDecoder, whose output is a Java array's identity (``[B@1b6d3586``), not its bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkalog.errors import InvalidArgumentError

API_PACKAGE = "org.apache.kafka.tools.api."
STRING_DECODER = API_PACKAGE + "StringDecoder"
_PACKAGES = (API_PACKAGE, "kafka.serializer.")

Decoder = Callable[[bytes, int, str], str]  # (bytes, offset, what) -> the printed text


def _string(data: bytes, offset: int, what: str) -> str:
    return data.decode("utf-8", errors="replace")  # new String(bytes, UTF_8)


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
