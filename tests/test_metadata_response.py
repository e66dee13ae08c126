"""The Metadata response written from remembered topic bytes against kio's writer: the same
bytes for every version served, on generated responses, whether a topic's bytes come from the
memo or not; and the broker's view of topics (names, partition counts, topic ids) follows
creation, growth and deletion although it is now kept between requests."""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from kafkalog.manager.log_manager import LogManager
from kafkalog.protocol import metadata_response
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.metadata_response import encode_metadata_body, topic_bytes
from kafkalog.protocol.wire import make, payload_module

pytestmark = pytest.mark.one_codec

VERSIONS = range(0, 13)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


def _kio(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


@st.composite
def responses(draw: st.DrawFn, version: int) -> Any:
    mod = payload_module(ApiKey.METADATA, version, True)
    topics = []
    for name in draw(st.lists(st.none() | names, max_size=4)):
        if name is None and version < 12:  # nullable from v12
            name = ""
        partitions = tuple(
            make(
                mod,
                "MetadataResponsePartition",
                error_code=draw(st.sampled_from([ErrorCode.none, ErrorCode.leader_not_available])),
                partition_index=p,
                leader_id=draw(st.integers(-1, 3)),
                leader_epoch=draw(st.integers(-1, 2**31 - 1)),
                replica_nodes=(1,),
                isr_nodes=draw(st.sampled_from([(), (1,)])),
                offline_replicas=(),
            )
            for p in range(draw(st.integers(0, 140)))  # past 127: a two-byte array length
        )
        topics.append(
            make(
                mod,
                "MetadataResponseTopic",
                error_code=draw(st.sampled_from([ErrorCode.none, ErrorCode.unknown_topic_id])),
                name=name,
                topic_id=uuid.UUID(int=draw(st.integers(0, 2**128 - 1))),
                is_internal=draw(st.booleans()),
                partitions=partitions,
                topic_authorized_operations=draw(st.integers(-(2**31), 2**31 - 1)),
            )
        )
    if draw(st.booleans()):
        topics *= 40  # past 127 topics: a two-byte array length
    return make(
        mod,
        "MetadataResponse",
        throttle_time=datetime.timedelta(milliseconds=draw(st.integers(0, 2**31 - 1))),
        brokers=(
            make(mod, "MetadataResponseBroker", node_id=1, host=draw(names), port=9092, rack=None),
        ),
        cluster_id=draw(st.none() | names) if version >= 2 else None,
        controller_id=1,
        topics=tuple(topics),
        cluster_authorized_operations=draw(st.integers(-(2**31), 2**31 - 1)),
    )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_spliced_response_is_kios_byte_for_byte(version: int, data: st.DataObject) -> None:
    body = data.draw(responses(version))
    expected = _kio(body)
    assert encode_metadata_body(body) == expected
    assert encode_metadata_body(body) == expected  # the second time from the memo


def test_a_topic_is_encoded_once_while_its_entry_is_the_same_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = payload_module(ApiKey.METADATA, 12, True)
    topic = make(
        mod,
        "MetadataResponseTopic",
        error_code=ErrorCode.none,
        name="clicks",
        topic_id=uuid.uuid4(),
        is_internal=False,
        partitions=(),
        topic_authorized_operations=-(2**31),
    )
    calls: list[object] = []
    real = metadata_response._encode

    def counting(entity: Any) -> bytes:
        calls.append(entity)
        return real(entity)

    monkeypatch.setattr(metadata_response, "_encode", counting)
    first = topic_bytes(topic)
    assert topic_bytes(topic) == first and calls == [topic]
    equal_but_new = dataclasses.replace(topic)
    assert topic_bytes(equal_but_new) == first and len(calls) == 2  # by identity, not equality
    # a name a client asked about that is no topic: encoded each time, never kept
    missing = dataclasses.replace(topic, error_code=ErrorCode.unknown_topic_or_partition)
    assert topic_bytes(missing) == topic_bytes(missing) and len(calls) == 4
    assert all(entry is not missing for entry, _ in metadata_response._encoded.values())


def test_the_topic_view_follows_creation_growth_and_deletion(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as manager:
        manager.create_topic("b", 2)
        manager.create_topic("a", 1)
        assert manager.topics() == {"a": 1, "b": 2} and list(manager.topics()) == ["a", "b"]
        with pytest.raises(TypeError):  # a read-only view: nobody changes it through it
            manager.topics()["a"] = 99  # type: ignore[index]
        first_id = manager.topic_id("a")
        assert first_id is not None and manager.topic_id("a") == first_id
        manager.create_partitions("b", 3)
        assert manager.topics() == {"a": 1, "b": 3}
        manager.delete_topic("a")
        assert manager.topics() == {"b": 3}
        manager.create_topic("a", 2)
        assert manager.topics() == {"a": 2, "b": 3}
        second_id = manager.topic_id("a")
        assert second_id is not None and second_id != first_id  # a new topic, a new id
