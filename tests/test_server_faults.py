"""``kafkalog serve`` under bad input and faults: malformed, truncated, oversized and random
frames never crash the server or touch a log; SIGTERM closes the logs cleanly; a kill -9 under
acks=all produce load loses no acknowledged record."""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import time
from pathlib import Path

import pytest

from kafka_oracle import free_port
from kafkalog import LogManager, MemoryRecords, Record
from kafkalog.server import serve
from server_helpers import (
    api_versions_request,
    batch,
    decode_response,
    exchange,
    fetch_body,
    frame,
    metadata_request,
    produce_body,
    read_frame,
    start_serve_process,
)

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]


def _api_versions_ok(port: int) -> bool:
    data = exchange(port, frame(18, 0, api_versions_request(0), 9))
    return decode_response(18, 0, data, header_v1=False).error_code == 0


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_bad_frames_close_only_their_connection(tmp_path: Path) -> None:
    with serve(tmp_path, overrides={"socket.request.max.bytes": "4096"}) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        server.manager.create_topic("t", 1)  # type: ignore[union-attr]
        good = frame(0, 9, produce_body(9, "t", 0, batch([Record(b"kept")])))
        cases = {
            "oversized": struct.pack(">i", 5000),
            "negative size": struct.pack(">i", -7),
            "unknown api key": struct.pack(">ihhi", 8, 777, 0, 1),
            "unsupported produce version": struct.pack(">ihhi", 8, 0, 1, 5),
            "truncated body": struct.pack(">i", len(good) - 4 - 10) + good[4:-10],
        }
        for name, data in cases.items():
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(data)
                assert _closed(sock), name
            assert _api_versions_ok(port), f"the server stopped answering after: {name}"
        # bytes after the last field are ignored, as Kafka's parser ignores them
        trailing = struct.pack(">i", len(good) - 4 + 3) + good[4:] + b"xyz"
        for data in (good, trailing):
            produced = exchange(port, data)
            answer = decode_response(0, 9, produced, header_v1=True)
            assert answer.responses[0].partition_responses[0].error_code == 0
        log = server.manager.get_log("t", 0)  # type: ignore[union-attr]
        assert [r.value for r in log.read_records(0)] == [b"kept", b"kept"]


def test_random_and_mutated_requests_never_crash_the_server_or_touch_a_log(tmp_path: Path) -> None:
    rng = random.Random(20261123)
    seeds = [
        frame(0, 9, produce_body(9, "t", 0, batch([Record(b"v", b"k")]))),
        frame(1, 12, fetch_body(12, "t", 0, 0)),
        frame(
            3,
            12,
            metadata_request(12, allow=False),
        ),
        frame(
            18,
            3,
            api_versions_request(3),
        ),
    ]
    with serve(tmp_path, overrides={"auto.create.topics.enable": "false"}) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        server.manager.create_topic("t", 1)  # type: ignore[union-attr]
        for _ in range(300):
            data = bytearray(rng.choice(seeds))
            kind = rng.randrange(3)
            if kind == 0:  # flip bytes after the size prefix
                for _ in range(rng.randint(1, 4)):
                    data[rng.randrange(4, len(data))] = rng.randrange(256)
            elif kind == 1:  # random bytes with a plausible size
                body = rng.randbytes(rng.randint(0, 64))
                data = bytearray(struct.pack(">i", len(body)) + body)
            else:  # cut short and close
                data = data[: rng.randrange(len(data))]
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(bytes(data))
                sock.shutdown(socket.SHUT_WR)
                while read_frame(sock):
                    pass
        assert _api_versions_ok(port)
        log = server.manager.get_log("t", 0)  # type: ignore[union-attr]
        # a mutated produce can only append if its batch still passes the CRC, i.e. the
        # flip hit a field outside it: whatever was appended is the seed's record
        for record in log.read_records(0, 1 << 24):
            assert record.value == b"v" and record.key == b"k"
    # the files are sound
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    assert CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)]).exit_code == 0


def test_sigterm_stops_the_server_cleanly(tmp_path: Path) -> None:
    """Also: a directory Kafka formatted, served without its server.properties, is warned of
    (Kafka's defaults, not the broker's, then apply to its topics)."""
    port = free_port()
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    seen: list[str] = []
    proc = start_serve_process(tmp_path, port, seen=seen, drain=False)
    assert any("is a Kafka broker's (meta.properties) and no --config" in line for line in seen)
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
    producer.send("s", b"x").get(10)
    producer.close()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "the logs were closed cleanly" in out
    assert (tmp_path / ".kafka_cleanshutdown").exists()


def test_kill_9_under_produce_load_loses_no_acknowledged_record(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    port = free_port()
    proc = start_serve_process(tmp_path, port, drain=False)
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    acked: list[bytes] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    killed_at = None
    for i in range(20_000):
        producer.produce("load", value=b"%08d" % i, on_delivery=on_delivery)
        producer.poll(0)
        if killed_at is None and len(acked) >= 2000:
            os.kill(proc.pid, signal.SIGKILL)
            killed_at = len(acked)
            break
        if i % 500 == 0:
            producer.flush(10)
    producer.flush(10)
    proc.wait(30)
    assert killed_at is not None, "the producer never reached 2000 acknowledgements"
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    with LogManager([tmp_path]) as manager:
        values = {r.value for r in manager.get_log("load", 0).read_records(0, 1 << 26)}
    missing = [v for v in acked if v not in values]
    assert not missing, f"{len(missing)} acknowledged records were lost, e.g. {missing[:3]}"


def test_wrong_arguments_are_one_line_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["serve", "--log-dirs", str(tmp_path), *args])
        assert "Traceback" not in result.output
        return result.exit_code, result.output

    code, out = run("--override", "no-equals-sign")
    assert code == 2 and "'no-equals-sign' is not key=value" in out
    code, out = run("--override", "listeners=SSL://127.0.0.1:9093")
    assert code != 0 and "ssl.keystore.location" in out and "needs a PEM key store" in out
    code, out = run("--override", "socket.request.max.bytes=0")
    assert code != 0 and "socket.request.max.bytes" in out
    code, out = run("--config", str(tmp_path / "missing.properties"))
    assert code != 0 and "missing.properties" in out
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = run("--override", f"listeners=PLAINTEXT://127.0.0.1:{port}")
        assert code != 0 and "cannot listen on PLAINTEXT://127.0.0.1" in out
    # the failed starts above closed their logs: this manager can take the directory lock
    with LogManager([tmp_path]):
        code, out = run("--override", "listeners=PLAINTEXT://127.0.0.1:0")
        assert code != 0 and "lock" in out.lower()


def _port(server: object) -> int:
    return int(server.bootstrap_servers.rsplit(":", 1)[1])  # type: ignore[attr-defined]


def test_a_pipelining_client_holds_at_most_a_few_frames_of_the_server(tmp_path: Path) -> None:
    """A client that pipelines ten slow requests without reading: the server reads one frame
    ahead of the one it answers and leaves the rest in the socket, then answers all in order."""
    with serve(tmp_path) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        server.manager.get_log("t").append([Record(b"x")])
        waits = [fetch_body(12, "t", 0, offset=0, min_bytes=10**6, max_wait_ms=150)] * 10
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
            sock.sendall(b"".join(frame(1, 12, body, i) for i, body in enumerate(waits)))
            peak, deadline = 0, time.monotonic() + 1.0
            while time.monotonic() < deadline:
                peak = max(peak, server.queued_requests)
                time.sleep(0.01)
            answers = [decode_response(1, 12, read_frame(sock), header_v1=True) for _ in waits]
        assert 1 <= peak <= 3  # answering one, one queued, one read and waiting for room
        assert all(a.responses[0].partitions[0].records for a in answers)
        for _ in range(100):
            if server.queued_requests == 0:
                break
            time.sleep(0.02)
        assert server.queued_requests == 0


def test_a_parked_long_poll_holds_no_request_slot(tmp_path: Path) -> None:
    """With ``queued.max.requests=2`` and a client's two pipelined long polls, the first
    waits for data in the purgatory and holds no slot; the second is read and waits its turn
    (one slot); another client is answered at once, where it used to wait for a poll to end."""
    with serve(tmp_path, overrides={"queued.max.requests": "2"}) as server:
        assert server.manager is not None
        server.manager.create_topic("t", 1)
        slow = fetch_body(12, "t", 0, offset=0, min_bytes=10**6, max_wait_ms=800)
        port = _port(server)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as busy:
            busy.sendall(frame(1, 12, slow, 1) + frame(1, 12, slow, 2))
            time.sleep(0.2)
            assert server.parked_fetches == 1
            assert server.queued_requests == 1
            started = time.monotonic()
            assert _api_versions_ok(port)
            assert time.monotonic() - started < 0.3
            read_frame(busy)
            read_frame(busy)
        assert server.queued_requests == 0


def test_every_api_key_and_version_with_a_random_body(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """For every API and version the broker advertises: a correct header, then an empty
    body and random bodies (a few of which parse). None crashes the server or makes a handler
    fail with anything but a refusal; the logs hold only what was validly written."""
    from kio.schema.request_header.v2.header import RequestHeader as HeaderV2

    from kafkalog.protocol.wire import _entity
    from kafkalog.server.apis import SUPPORTED_VERSIONS

    rng = random.Random(20261124)
    with serve(tmp_path, overrides={"auto.create.topics.enable": "false"}) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        server.manager.create_topic("t", 1)  # type: ignore[union-attr]
        sent = 0
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
            for version in range(low, high + 1):
                flexible = _entity(key, version, False).__header_schema__ is HeaderV2
                header = struct.pack(">hhih", key, version, sent, 4) + b"fuzz"
                header += b"\x00" if flexible else b""  # no tagged fields
                for body in (b"", *(rng.randbytes(rng.randint(1, 48)) for _ in range(3))):
                    data = header + body
                    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                        sock.sendall(struct.pack(">i", len(data)) + data)
                        sock.shutdown(socket.SHUT_WR)
                        while read_frame(sock):
                            pass
                    sent += 1
        assert sent > 400
        assert _api_versions_ok(port)
    unexpected = [r.getMessage() for r in caplog.records if "unexpected" in r.getMessage()]
    assert unexpected == []
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    assert CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)]).exit_code == 0


@pytest.mark.parametrize("bit", [36, 0], ids=["high bit", "low bit"])
def test_fetch_never_sends_a_batch_whose_base_offset_was_flipped(tmp_path: Path, bit: int) -> None:
    """A base offset lies outside its batch's CRC, and Fetch sends segment bytes as they are:
    a flipped bit in the middle of the active segment, made while the server was down, must
    not reach clients as records at offsets that never existed. Clients get every batch before
    it, then CORRUPT_MESSAGE where it starts."""
    from test_reliability_files import batch_positions

    with LogManager(tmp_path) as manager:
        # index entries after the damage: the start-up check of the active segment's tail
        # (from its last index entry) does not reach it, so it is met by the reads
        log = manager.create_topic("t", 1, {"index.interval.bytes": "100"})[0]
        for i in range(20):
            log.append([Record(b"v%d" % (i * 10 + j)) for j in range(10)])
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    at = batch_positions(segment)[8]
    data = bytearray(segment.read_bytes())
    true = struct.unpack_from(">q", data, at)[0]
    struct.pack_into(">q", data, at, true ^ (1 << bit))
    segment.write_bytes(data)
    with serve(tmp_path) as server:
        port = _port(server)
        offsets: list[int] = []
        codes = []
        offset = 0
        for _ in range(5):
            answer = decode_response(
                1, 12, exchange(port, frame(1, 12, fetch_body(12, "t", 0, offset))), header_v1=True
            )
            part = answer.responses[0].partitions[0]
            codes.append(part.error_code)
            if part.records:
                for batch in MemoryRecords(part.records).batches():
                    offsets += [r.offset for r in batch]
                offset = offsets[-1] + 1
    assert offsets == list(range(true)), offsets[-3:]
    assert 2 in codes  # CORRUPT_MESSAGE at the damaged batch
