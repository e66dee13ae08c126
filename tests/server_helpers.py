"""Helpers for the ``kafkalog serve`` tests: request frames built with kio (the same generated
codecs a Python client would use), a broker core over a LogManager in a temporary directory, and
a raw socket client."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

from kafkalog import LogManager, MemoryRecords, Record
from kafkalog.manager.server_config import ServerConfig
from kafkalog.protocol.wire import Request, decode_request, is_flexible, make, payload_module
from kafkalog.server.apis import SUPPORTED_VERSIONS, Broker
from kafkalog.server.context import BrokerContext, BrokerSettings
from kafkalog.server.producer_ids import ProducerIdManager

MS = datetime.timedelta(milliseconds=1)


def request_module(api_key: int, version: int) -> Any:
    return payload_module(api_key, version, False)


def frame(api_key: int, version: int, body: Any, correlation_id: int = 1) -> bytes:
    """A whole request frame, size prefix included."""
    out = io.BytesIO()
    if is_flexible(api_key, version):
        header: Any = HeaderV2(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(correlation_id),
            client_id="test",
        )
        entity_writer(HeaderV2)(out, header)
    else:
        header = HeaderV1(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(correlation_id),
            client_id="test",
        )
        entity_writer(HeaderV1)(out, header)
    entity_writer(type(body))(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def as_request(api_key: int, version: int, body: Any) -> Request:
    return decode_request(frame(api_key, version, body)[4:], SUPPORTED_VERSIONS)


def decode_response(api_key: int, version: int, data: bytes, *, header_v1: bool) -> Any:
    """The body of a response frame (size prefix included)."""
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    skip = 4 + 4 + (1 if header_v1 else 0)  # size, correlation id, empty tagged fields
    cls = next(
        v
        for v in vars(payload_module(api_key, version, True)).values()
        if isinstance(v, type) and getattr(v, "__type__", None) is EntityType.response
    )
    body, used = entity_reader(cls)(data, skip)
    assert skip + used == len(data)
    return body


def api_versions_request(version: int) -> Any:
    extra = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    return make(request_module(18, version), "ApiVersionsRequest", **extra)


def metadata_request(version: int, topics: list[str] | None = None, allow: bool = False) -> Any:
    mod = request_module(3, version)
    items = (
        None
        if topics is None
        else tuple(make(mod, "MetadataRequestTopic", name=t, topic_id=None) for t in topics)
    )
    return make(
        mod,
        "MetadataRequest",
        topics=items,
        allow_auto_topic_creation=allow,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )


def batch(records: list[Record], **fields: Any) -> bytes:
    return bytes(MemoryRecords.build(records, **fields))


def produce_body(
    version: int, topic: str, partition: int, records: bytes | None, acks: int = -1
) -> Any:
    mod = request_module(0, version)
    return make(
        mod,
        "ProduceRequest",
        transactional_id=None,
        acks=acks,
        timeout=1000 * MS,
        topic_data=(
            make(
                mod,
                "TopicProduceData",
                name=topic,
                partition_data=(
                    make(mod, "PartitionProduceData", index=partition, records=records),
                ),
            ),
        ),
    )


def offset_commit_body(group_id: str, offset: int, topic: str = "t") -> Any:
    """An OffsetCommit v8 of ``offset`` for partition 0 of ``topic``, by no member (a simple
    group)."""
    mod = request_module(8, 8)
    partition = make(
        mod,
        "OffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    return make(
        mod,
        "OffsetCommitRequest",
        group_id=group_id,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(make(mod, "OffsetCommitRequestTopic", name=topic, partitions=(partition,)),),
    )


def fetch_body(
    version: int,
    topic: str,
    partition: int,
    offset: int,
    *,
    min_bytes: int = 1,
    max_wait_ms: int = 0,
    isolation: int = 0,
    max_bytes: int = 1 << 20,
    partitions: Sequence[int] = (),
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Sequence[int] = (),
) -> Any:
    """A Fetch of ``partition`` (or of each of ``partitions``) of ``topic`` from ``offset``
    (no partition at all for ``partitions=[]`` with ``session_epoch`` > 0: an incremental
    fetch of a session with nothing new to say); ``forgotten`` partitions of ``topic``
    leave the session."""
    mod = request_module(1, version)
    listed = partitions if partitions or session_epoch > 0 else (partition,)
    return make(
        mod,
        "FetchRequest",
        replica_id=-1,
        max_wait=max_wait_ms * MS,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=(
            make(
                mod,
                "FetchTopic",
                topic=topic,
                partitions=tuple(
                    make(
                        mod,
                        "FetchPartition",
                        partition=index,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                    for index in listed
                ),
            ),
        )
        if listed
        else (),
        forgotten_topics_data=(
            (make(mod, "ForgottenTopic", topic=topic, partitions=tuple(forgotten)),)
            if forgotten
            else ()
        ),
        rack_id="",
    )


def broker_over(path: Path, **props: Any) -> tuple[Broker, LogManager]:
    config = ServerConfig.from_properties({"log.dirs": str(path), **props})
    manager = LogManager.from_server_config(config)
    context = BrokerContext(
        manager, BrokerSettings.from_server_config(config), ProducerIdManager(config.log_dirs), "c"
    )
    context.broker_properties = config.properties
    return Broker(context), manager


def exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes and read until the server closes or one whole response arrives."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_frame(sock)


def read_frame(sock: socket.socket) -> bytes:
    head = _read_exactly(sock, 4)
    if not head:
        return b""
    (size,) = struct.unpack(">i", head)
    return head + _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return out
        out += chunk
    return out


def start_serve_process(
    log_dir: Path,
    port: int,
    overrides: dict[str, str] | None = None,
    seen: list[str] | None = None,
    *,
    drain: bool = True,
    open_files: int | None = None,
) -> subprocess.Popen[str]:
    """``kafkalog serve`` in a process of its own on ``PLAINTEXT://127.0.0.1:port`` (unless
    ``overrides`` names other listeners), once it says it started; ``seen`` collects its lines
    up to then. Its output is drained from then on (``drain``), so its logging never blocks
    it; without, the caller reads the rest. ``open_files`` sets its soft and hard limit on
    open files (``ulimit -n``)."""
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", **(overrides or {})}
    args = [arg for key, value in settings.items() for arg in ("--override", f"{key}={value}")]

    command = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(log_dir), *args]
    if open_files is not None:  # the shell's ulimit -n sets the soft and the hard limit
        command = ["sh", "-c", f'ulimit -n {open_files} && exec "$0" "$@"', *command]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if seen is not None:
            seen.append(line)
        if "kafkalog serve started" in line:
            if drain:
                threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"kafkalog serve did not start: {proc.stdout.read()}")
