"""A Metadata response written from each topic's bytes, kept from the last answer that listed
the topic unchanged.

Why: a consumer with a regex subscription asks for every topic, every few seconds, and every
client asks again when it joins a group; on a broker with thousands of partitions encoding
the same unchanged topic entries field by field was most of the answer's time. The handler
reuses the very same (immutable) topic entry while the topic is unchanged, so its encoded
bytes are found by identity; the rest of the response is kio's own encoding, with the topics
spliced in where a marker topic stood.

Refuses: nothing kio would write differently; the tests compare both byte for byte.
"""

from __future__ import annotations

import dataclasses
import io
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial.writers import write_int32, write_unsigned_varint
from kio.static.primitive import i32, uvarint

# cached encodings at most; past it the memo starts over (topics come and go)
MAX_CACHED_TOPICS = 1 << 16
_MARKER_NAME = f"kafkalog-splice-{uuid.uuid4().hex}"  # no real topic name is this long

_encoded: dict[int, tuple[Any, bytes]] = {}  # id(topic entry) -> (the entry, its bytes)


def _encode(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def topic_bytes(topic: Any) -> bytes:
    """``topic``'s encoding, from the memo while the same entry object is asked for again.
    Only an existing topic's entry (no error) is kept: the handler reuses those, while the
    entries it makes for names a client merely asked about are new each time, and a client
    asking for thousands of made-up names would only churn the memo."""
    if topic.error_code != ErrorCode.none:
        return _encode(topic)
    key = id(topic)
    found = _encoded.get(key)
    if found is not None and found[0] is topic:
        return found[1]
    data = _encode(topic)
    if len(_encoded) >= MAX_CACHED_TOPICS:
        _encoded.clear()
    _encoded[key] = (topic, data)  # the entry held, so its id is not reused meanwhile
    return data


def _array_length(count: int, flexible: bool) -> bytes:
    out = io.BytesIO()
    if flexible:
        write_unsigned_varint(out, uvarint(count + 1))  # a compact array's length: n + 1
    else:
        write_int32(out, i32(count))
    return out.getvalue()


def encode_metadata_body(body: Any) -> bytes:
    """The bytes kio writes for ``body`` (a MetadataResponse of any version), each topic from
    ``topic_bytes``."""
    topics = body.topics
    if not topics:
        return _encode(body)
    marker = dataclasses.replace(topics[0], name=_MARKER_NAME, partitions=())
    flexible = bool(type(body).__flexible__)
    whole = _encode(dataclasses.replace(body, topics=(marker,)))
    marker_bytes = _encode(marker)
    at = whole.index(marker_bytes)
    head = at - len(_array_length(1, flexible))
    parts = [whole[:head], _array_length(len(topics), flexible)]
    parts += [topic_bytes(t) for t in topics]
    parts.append(whole[at + len(marker_bytes) :])
    return b"".join(parts)
