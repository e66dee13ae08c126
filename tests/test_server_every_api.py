"""Every API the door declares, at every version it serves, answered: a request with one of
everything (one topic, one partition, one member ...) built from kio's schema for that version
goes to a running ``kafkalog serve`` and a response of that version comes back and decodes.
So every handler builds its response at every version it claims, through ``wire.make``, which
refuses a field no version of the message has."""

from __future__ import annotations

import dataclasses
import datetime
import socket
import types
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafkalog import LogManager, MemoryRecords, Record
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import _entity, is_flexible
from kafkalog.server import serve
from kafkalog.server.apis import SUPPORTED_VERSIONS
from server_helpers import decode_response, frame, read_frame

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

RECORDS = bytes(MemoryRecords.build([Record(b"v")]))


def _value(tp: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return _value(next(a for a in typing.get_args(tp) if a is not type(None)), name)
    if origin is tuple:
        return (_value(typing.get_args(tp)[0], name),)
    if dataclasses.is_dataclass(tp):
        return one_of_everything(tp)  # type: ignore[arg-type]
    parse = getattr(tp, "parse", tp)
    if issubclass(tp, bool):
        return False
    if issubclass(tp, datetime.timedelta):  # a wait or a timeout: short
        return parse(datetime.timedelta(milliseconds=10))
    if issubclass(tp, datetime.datetime):
        return datetime.datetime.now(datetime.UTC)
    if issubclass(tp, uuid.UUID):
        return uuid.UUID(int=0)
    if issubclass(tp, str):
        return parse("t")
    if issubclass(tp, bytes):
        return RECORDS if name == "records" else b""
    if issubclass(tp, float):
        return parse(1.0)
    if issubclass(tp, int):  # partition indexes 0 (partition 0 exists), the rest 1
        return parse(0 if "partition" in name or name in ("index", "key_type") else 1)
    return parse(0)


def one_of_everything(cls: type[Any]) -> Any:
    return cls(**{f.name: _value(f.type, f.name) for f in dataclasses.fields(cls)})


# destructive ones last, so the others meet the topic "t"
ORDER = sorted(
    SUPPORTED_VERSIONS,
    key=lambda k: (k in (ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS, ApiKey.DELETE_GROUPS), k),
)


def test_every_api_at_every_version_answers(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)[0].append([Record(b"x")])
    overrides = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
    answered = 0
    with serve(tmp_path, overrides=overrides) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        for key in ORDER:
            low, high = SUPPORTED_VERSIONS[key]
            for version in range(low, high + 1):
                body = one_of_everything(_entity(key, version, False))
                with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                    sock.sendall(frame(key, version, body, 7))
                    data = read_frame(sock)
                name = f"{ApiKey(key).name} v{version}"
                assert data, f"{name}: the connection closed instead of answering"
                flexible = key != ApiKey.API_VERSIONS and is_flexible(key, version)
                try:
                    response = decode_response(key, version, data, header_v1=flexible)
                except Exception as err:  # kio's reader: say which one
                    # -1 ms ("no start time", as Kafka writes it) is a datetime field to kio,
                    # whose reader refuses what Kafka's own clients read
                    if "negative timestamp" not in str(err):
                        raise AssertionError(f"{name}: {err!r}") from err
                else:
                    assert type(response).__name__.endswith("Response"), name
                answered += 1
    assert answered == sum(high - low + 1 for low, high in SUPPORTED_VERSIONS.values())
