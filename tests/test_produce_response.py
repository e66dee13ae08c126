"""The hand-written Produce response against kio's writer: the same bytes for every version
(3-11) on generated responses, and kio's frame wherever the hand-written one declines."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_writer

from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.produce_response import (
    PartitionAnswer,
    ProduceAnswer,
    RecordErrorAnswer,
    TopicAnswer,
    encode_produce_response,
)
from kafkalog.protocol.wire import Request, encode_response, make, payload_module

pytestmark = pytest.mark.one_codec

VERSIONS = range(3, 12)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
messages = st.none() | st.text(max_size=30)


@st.composite
def responses(draw: st.DrawFn, version: int) -> Any:
    mod = payload_module(ApiKey.PRODUCE, version, True)
    topics = []
    for name in draw(st.lists(names, max_size=3)):
        parts = []
        for _ in range(draw(st.integers(0, 3))):
            stamp = draw(st.none() | st.integers(0, 2**41))
            errors = draw(st.lists(st.tuples(st.integers(0, 2**31 - 1), messages), max_size=2))
            parts.append(
                make(
                    mod,
                    "PartitionProduceResponse",
                    index=draw(st.integers(0, 2**31 - 1)),
                    error_code=draw(st.sampled_from(list(ErrorCode))),
                    base_offset=draw(st.integers(-1, 2**63 - 1)),
                    log_append_time=None
                    if stamp is None
                    else EPOCH + datetime.timedelta(milliseconds=stamp),
                    log_start_offset=draw(st.integers(-1, 2**63 - 1)),
                    record_errors=tuple(
                        make(
                            mod,
                            "BatchIndexAndErrorMessage",
                            batch_index=i,
                            batch_index_error_message=m,
                        )
                        for i, m in (errors if version >= 8 else ())
                    ),
                    error_message=draw(messages),
                )
            )
        topics.append(
            make(mod, "TopicProduceResponse", name=name, partition_responses=tuple(parts))
        )
    throttle = datetime.timedelta(milliseconds=draw(st.integers(0, 2**31 - 1)))
    return make(mod, "ProduceResponse", responses=tuple(topics), throttle_time=throttle)


def kio_frame(version: int, correlation_id: int, body: Any) -> bytes:
    """The frame as kio writes it: header v1 from Produce v9 (flexible), else v0."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header = ResponseHeaderV1 if version >= 9 else ResponseHeaderV0
    entity_writer(header)(out, header(correlation_id=correlation_id))
    entity_writer(type(body))(out, body)
    frame = bytearray(out.getvalue())
    frame[:4] = (len(frame) - 4).to_bytes(4, "big")
    return bytes(frame)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_same_bytes_as_kio_at_every_version(version: int, data: st.DataObject) -> None:
    body = data.draw(responses(version))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    ours = encode_produce_response(version, correlation_id, body)
    assert ours == kio_frame(version, correlation_id, body)
    request = Request(ApiKey.PRODUCE, version, correlation_id, None, None)
    assert encode_response(request, body) == ours
    assert encode_response(request, _plain(body)) == ours  # what the handler builds


def _plain(body: Any) -> ProduceAnswer:
    """The kio response as the handler's plain objects, field for field."""
    return ProduceAnswer(
        tuple(
            TopicAnswer(
                topic.name,
                tuple(
                    PartitionAnswer(
                        p.index, p.error_code, p.base_offset, p.log_append_time,
                        getattr(p, "log_start_offset", -1),
                        tuple(RecordErrorAnswer(e.batch_index, e.batch_index_error_message)
                              for e in getattr(p, "record_errors", ())),
                        getattr(p, "error_message", None),
                    )
                    for p in topic.partition_responses
                ),
            )
            for topic in body.responses
        ),
        body.throttle_time,
    )  # fmt: skip


def test_what_the_broker_never_sets_is_left_to_kio() -> None:
    mod = payload_module(ApiKey.PRODUCE, 10, True)
    leader = mod.LeaderIdAndEpoch(leader_id=1, leader_epoch=3)
    part = make(mod, "PartitionProduceResponse", index=0, error_code=ErrorCode.none,
                base_offset=0, record_errors=(), current_leader=leader)  # fmt: skip
    topic = make(mod, "TopicProduceResponse", name="t", partition_responses=(part,))
    body = make(mod, "ProduceResponse", responses=(topic,),
                throttle_time=datetime.timedelta(0))  # fmt: skip
    assert encode_produce_response(10, 1, body) is None
    request = Request(ApiKey.PRODUCE, 10, 1, None, None)
    assert encode_response(request, body) == kio_frame(10, 1, body)  # kio writes it
    assert encode_produce_response(2, 1, body) is None
