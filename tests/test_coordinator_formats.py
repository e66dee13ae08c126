"""The internal topics' records are written from Kafka's own JSON schemas (generated into
records/coordinator_schemas.py) by the one writer, and read back by the one reader: bytes
equal to Kafka's layout at each version the coordinators write, and round trips at every
version the schemas define, tagged fields included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog.errors import InvalidArgumentError
from kafkalog.records.coordinator import decode
from kafkalog.records.coordinator_schemas import COORDINATOR_SCHEMAS
from kafkalog.records.schema_reader import SchemaReader
from kafkalog.records.schema_writer import encode_key, encode_versioned

pytestmark = pytest.mark.one_codec


def test_an_offset_commit_is_kafkas_bytes() -> None:
    """OffsetCommitKey (type 1) and OffsetCommitValue v3, as Kafka's serializer writes them:
    int16 type/version, int16-length strings, big-endian numbers."""
    key = encode_key("OffsetCommitKey", {"group": "g", "topic": "t", "partition": 3})
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = encode_versioned(
        "OffsetCommitValue",
        3,
        {"offset": 42, "leaderEpoch": 5, "metadata": "", "commitTimestamp": 1700},
    )
    assert value == (
        b"\x00\x03" + (42).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x00\x00"
        + (1700).to_bytes(8, "big")
    )  # fmt: skip
    record = decode("offsets", key, value)
    assert record.key == {"group": "g", "topic": "t", "partition": 3}
    assert record.value == {"offset": 42, "leaderEpoch": 5, "metadata": "", "commitTimestamp": 1700}


def test_a_flexible_version_writes_compact_lengths_and_only_tagged_fields_not_at_default() -> None:
    plain = encode_versioned(
        "OffsetCommitValue",
        4,
        {"offset": 1, "leaderEpoch": -1, "metadata": "m", "commitTimestamp": 2},
    )
    assert plain.endswith(b"\x02m" + (2).to_bytes(8, "big") + b"\x00")  # compact "m", no tags
    with_topic_id = encode_versioned(
        "OffsetCommitValue",
        4,
        {"offset": 1, "metadata": "m", "commitTimestamp": 2, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"},
    )
    assert with_topic_id[len(plain) - 1 :].startswith(b"\x01\x00\x10")  # one tag: 0, 16 bytes
    record = decode(
        "offsets", encode_key("OffsetCommitKey", {"group": "g", "topic": "t"}), with_topic_id
    )
    assert record.value is not None and record.value["topicId"] == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_a_version_the_schema_lacks_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no version 9"):
        encode_versioned("GroupMetadataValue", 9, {})


_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
    "bool": st.booleans(),
}


def _values(fields: Any, version: int) -> st.SearchStrategy[dict[str, Any]]:
    out: dict[str, st.SearchStrategy[Any]] = {}
    for name, kind, first, last, _tag, _default in fields:
        if version < first or (last is not None and version > last):
            continue
        if isinstance(kind, dict):  # one struct, null only where it may be
            inner = _values(kind["struct"], version)
            out[name] = st.none() | inner if kind["nullable"] else inner
        elif isinstance(kind, tuple):
            out[name] = st.lists(_values(kind, version), max_size=3)
        elif kind.startswith("[]"):
            out[name] = st.lists(_SCALARS[kind[2:]], max_size=3)
        elif kind == "uuid":
            out[name] = st.just("AAAAAAAAAAAAAAAAAAAAAQ")
        else:
            out[name] = _SCALARS[kind]
    return st.fixed_dictionaries(out)


@st.composite
def _messages(draw: st.DrawFn) -> tuple[str, int, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(COORDINATOR_SCHEMAS)))
    _key, (low, high), _flexible, fields = COORDINATOR_SCHEMAS[name]  # type: ignore[misc]
    version = draw(st.integers(low, high))
    return name, version, draw(_values(fields, version))


@given(_messages())
def test_every_schema_round_trips_through_the_writer_and_the_reader(
    message: tuple[str, int, dict[str, Any]],
) -> None:
    name, version, values = message
    _key, _valid, first_flexible, fields = COORDINATOR_SCHEMAS[name]
    data = encode_versioned(name, version, values)
    flexible = first_flexible is not None and version >= first_flexible  # type: ignore[operator]
    reader = SchemaReader(data, flexible=flexible)
    assert reader.fixed("int16") == version
    decoded = reader.struct(fields, version)  # type: ignore[arg-type]
    assert reader.pos == len(data)
    assert decoded == _as_read(fields, values)


def _as_read(fields: Any, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as the reader gives them back: tagged fields at their default left out at
    every depth, as Kafka's JSON converters leave them out."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        kind, tag, default = next((f[1], f[4], f[5]) for f in fields if f[0] == name)
        if tag is not None and value == default and not isinstance(kind, dict):
            continue
        if isinstance(kind, dict) and value is not None:
            value = _as_read(kind["struct"], value)
        elif isinstance(kind, tuple):
            value = [_as_read(kind, item) for item in value]
        out[name] = value
    return out


def test_a_consumer_group_member_is_the_bytes_kafka_4_3_1_wrote() -> None:
    """ConsumerGroupMemberMetadataValue as Kafka 4.3.1's broker wrote it (copied from its
    ``__consumer_offsets``): a member of the consumer protocol has no classic metadata, and
    Kafka's generated code still writes that tagged struct, as null (presence varint 0)."""
    kafka = b"\x00\x00\x00\x00\x05test\x0b/127.0.0.1\x02\x03cg\x01\x00\x00u0\x00\x01\x00\x01\x00"
    values = {
        "instanceId": None, "rackId": None, "clientId": "test", "clientHost": "/127.0.0.1",
        "subscribedTopicNames": ["cg"], "subscribedTopicRegex": "", "rebalanceTimeoutMs": 30000,
        "serverAssignor": None, "classicMemberMetadata": None,
    }  # fmt: skip
    assert encode_versioned("ConsumerGroupMemberMetadataValue", 0, values) == kafka
    key = encode_key("ConsumerGroupMemberMetadataKey", {"groupId": "g", "memberId": "a"})
    record = decode("offsets", key, kafka)
    assert record.record_type == 5 and record.key == {"groupId": "g", "memberId": "a"}
    assert record.value == values  # the null struct printed, as Kafka's converter prints it
