"""``dump-log --cluster-metadata-decoder``: KRaft metadata records as kafka-dump-log prints them.

Why: a data engineer reading a ``__cluster_metadata`` segment or a snapshot wants the topics,
partitions, brokers and configs in it, in the JSON Kafka's tool prints:
``{"type":"TOPIC_RECORD","version":0,"data":{...}}``. A record's value is MetadataRecordSerde's
frame (frame version 1, api key, version as unsigned varints) around a flexible message whose
schema is Kafka's own (metadata_schemas.py, generated from Kafka's JSON); the data object
follows Kafka's generated JsonConverters: fields in schema order, a tagged field only when it
differs from its default, UUIDs in Kafka's base64, bytes in base64. Refuses: guessing at a
record it has no schema for (the line says so, as Kafka's does, and the dump goes on).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from kafkalog.errors import CorruptRecordError
from kafkalog.records.metadata_schemas import SCHEMAS
from kafkalog.records.schema_reader import SchemaReader


def _json(value: Any) -> Any:
    """Bytes as Jackson's BinaryNode prints them (base64); the rest as decoded."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def _type_name(record_name: str) -> str:
    """MetadataRecordType's constant: TopicRecord -> TOPIC_RECORD."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", record_name).upper()


def _java_double(x: float) -> str:
    """Jackson prints a double as Java's Double.toString: 1.5, 1.0E7, 1.0E-4."""
    if x != 0 and not 1e-3 <= abs(x) < 1e7:
        mantissa, exponent = f"{x:.17e}".split("e")
        digits = repr(float(mantissa)).rstrip("0").rstrip(".")
        digits = digits if "." in digits else digits + ".0"
        return f"{digits}E{int(exponent)}"
    return repr(x)


def metadata_json(value: bytes | None, offset: int) -> str:
    """The payload Kafka's ClusterMetadataLogMessageParser prints for one record's value."""
    reader = SchemaReader(value or b"", flexible=True, what="a metadata record")
    try:
        frame = reader.uvarint()
        if frame != 1:
            raise CorruptRecordError(
                f"Could not deserialize metadata record due to unknown frame version {frame} "
                "(only frame version 1 is supported)"
            )
        api_key, version = reader.uvarint(), reader.uvarint()
        schema = SCHEMAS.get(api_key)
        if schema is None:
            raise CorruptRecordError(f"Unknown metadata id {api_key}")
        name, _, fields = schema
        data = reader.struct(fields, version)  # type: ignore[arg-type]
    except CorruptRecordError as err:
        return f"Error at {offset}, skipping. {err}"
    text = json.dumps({"type": _type_name(str(name)), "version": version, "data": _json(data)},
                      separators=(",", ":"), ensure_ascii=False)  # fmt: skip
    return re.sub(r'(?<=:)(-?\d+\.\d+(?:e[-+]?\d+)?)(?=[,}\]])',
                  lambda m: _java_double(float(m[1])), text)  # fmt: skip
