"""Where a Produce request runs: on the event loop when it is small, outside a transaction and
to open partitions that never fsync in the append; on a request handler thread otherwise (a
topic to create, ``flush.messages``/``flush.ms`` set, a transactional id, a frame over 1 MiB).
Measured, the hand-off to a thread and back cost a third of the broker's produce throughput;
these are the cases where blocking the loop would cost everybody else more. And where a
Metadata request runs: on the loop for a few partitions of known topics, else on a thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kafkalog import LogManager, Record, serve
from kafkalog.log.log import Log
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import make
from kafkalog.server import metadata as metadata_module
from kafkalog.server import produce as produce_module
from server_helpers import (
    batch,
    decode_response,
    frame,
    metadata_request,
    produce_body,
    read_frame,
)

pytestmark = pytest.mark.one_codec


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The name of the thread each Log.append_records call ran on."""
    seen: list[str] = []
    original = Log.append_records

    def recorded(self: Log, *args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Log, "append_records", recorded)
    yield seen


def produce(port: int, body: Any) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(frame(ApiKey.PRODUCE, 9, body, 5))
        answer = decode_response(0, 9, read_frame(sock), header_v1=True)
    code: int = answer.responses[0].partition_responses[0].error_code
    return code


def test_where_each_produce_runs(tmp_path: Path, threads: list[str]) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("plain", 1)
        manager.create_topic("synced", 1, {"flush.messages": "1"})
        manager.create_topic("timed", 1, {"flush.ms": "1000"})
        manager.create_topic("wide", 1, {"max.message.bytes": str(4 << 20)})
    with serve(tmp_path) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        one = batch([Record(b"x")])
        for topic in ("plain", "synced", "timed"):
            assert produce(port, produce_body(9, topic, 0, one)) == 0, topic
        assert produce(port, produce_body(9, "missing", 0, one)) == 3  # answered, not created
        big = batch([Record(b"x" * 1000) for _ in range(1100)])  # a frame over 1 MiB
        assert produce(port, produce_body(9, "wide", 0, big)) == 0
    loop, synced, timed, large = threads
    assert loop == "kafkalog-serve"  # the serve() thread runs the event loop
    for name in (synced, timed, large):
        assert name != loop and name.startswith("kafkalog-io"), threads


def test_transactions_missing_partitions_and_odd_acks_go_to_a_handler_thread(
    tmp_path: Path,
) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
        context = SimpleNamespace(manager=manager)  # what the rule reads of the broker
        body = produce_body(9, "t", 0, batch([Record(b"x")]))
        mod = __import__(type(body).__module__, fromlist=["ProduceRequest"])

        def on_loop(**changes: Any) -> bool:
            fields = {"transactional_id": None, "acks": -1, "timeout": body.timeout,
                      "topic_data": body.topic_data, **changes}  # fmt: skip
            request = SimpleNamespace(body=make(mod, "ProduceRequest", **fields))
            return produce_module.appends_on_the_loop(context, request)  # type: ignore[arg-type]

        assert on_loop()
        assert not on_loop(transactional_id="tx")
        assert not on_loop(acks=2)
        other = produce_body(9, "absent", 0, batch([Record(b"x")]))
        assert not on_loop(topic_data=other.topic_data)


def test_where_each_metadata_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A few partitions of topics that exist: the loop. Every topic, a topic to create, or more
    partitions than ANSWER_ON_THE_LOOP_PARTITIONS: a handler thread."""
    seen: list[tuple[str, str]] = []
    original = metadata_module._topic_entry

    def recorded(ctx: Any, request: Any, mod: Any, topic: str, known: Any) -> Any:
        seen.append((topic, threading.current_thread().name))
        return original(ctx, request, mod, topic, known)

    monkeypatch.setattr(metadata_module, "_topic_entry", recorded)
    wide = metadata_module.ANSWER_ON_THE_LOOP_PARTITIONS + 1
    with LogManager(tmp_path) as manager:
        manager.create_topic("small", 3)
        manager.create_topic("wide", wide)
    with serve(tmp_path) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            asked: list[tuple[list[str] | None, bool]] = [
                (["small"], False), (None, False), (["small", "wide"], False),
                (["created"], True), (["created"], False),
            ]  # fmt: skip
            for topics, allow in asked:
                sock.sendall(frame(ApiKey.METADATA, 12, metadata_request(12, topics, allow), 1))
                answer = decode_response(3, 12, read_frame(sock), header_v1=True)
                assert all(t.error_code == 0 for t in answer.topics), answer
    loop, io = "kafkalog-serve", "kafkalog-io"
    where = [(topic, "loop" if name == loop else name[: len(io)]) for topic, name in seen]
    assert where == [
        ("small", "loop"),
        ("small", io), ("wide", io),  # every topic
        ("small", io), ("wide", io),  # more partitions than the loop takes
        ("created", io),  # auto-created
        ("created", "loop"),  # then known
    ], seen  # fmt: skip
