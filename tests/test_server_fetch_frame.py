"""The hand-written Fetch response frame: byte-equal to kio's generated encoding for every
served version, records sent from the segment file through a descriptor of their own (which
outlives the segment's deletion), and no descriptor left open by fetches that were answered or
waited out, also when their client goes meanwhile."""

from __future__ import annotations

import datetime
import os
import random
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from kafkalog import LogConfig, Record
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.fetch_frame import (
    FetchResponseData,
    OpenSlice,
    PartitionResponse,
    TopicResponse,
    encode_fetch_response,
)
from kafkalog.protocol.wire import Request, encode_response, make, payload_module
from kafkalog.server import serve
from server_helpers import as_request, broker_over, fetch_body, frame, read_frame

pytestmark = pytest.mark.one_codec


def _random_response(rng: random.Random) -> FetchResponseData:
    topics = []
    for t in range(rng.randrange(0, 4)):
        parts = []
        for p in range(rng.randrange(0, 4)):
            aborted = rng.choice(
                [None, [], [(rng.randrange(1 << 40), rng.randrange(1 << 40)) for _ in range(3)]]
            )
            parts.append(
                PartitionResponse(
                    p,
                    rng.choice([0, 1, 3, 6]),
                    rng.randrange(-1, 1 << 50),
                    rng.randrange(-1, 1 << 50),
                    rng.randrange(-1, 1 << 50),
                    aborted,
                    rng.randbytes(rng.choice([0, 1, 200, 70_000])),
                )
            )
        topics.append(TopicResponse(f"topic-é-{t}" * rng.randrange(1, 3), parts))
    return FetchResponseData(rng.choice([0, 15]), topics, rng.randrange(100), rng.randrange(9))


def _kio_body(version: int, data: FetchResponseData) -> Any:
    mod = payload_module(ApiKey.FETCH, version, True)
    return make(
        mod,
        "FetchResponse",
        throttle_time=datetime.timedelta(milliseconds=data.throttle_ms),
        error_code=ErrorCode(data.error_code),
        session_id=i32(data.session_id),
        responses=tuple(
            make(
                mod,
                "FetchableTopicResponse",
                topic=t.name,
                partitions=tuple(
                    make(
                        mod,
                        "PartitionData",
                        partition_index=p.index,
                        error_code=ErrorCode(p.error_code),
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.last_stable_offset,
                        log_start_offset=p.log_start_offset,
                        aborted_transactions=None
                        if p.aborted is None
                        else tuple(
                            make(mod, "AbortedTransaction", producer_id=a, first_offset=b)
                            for a, b in p.aborted
                        ),
                        preferred_read_replica=-1,
                        records=p.records,
                    )
                    for p in t.partitions
                ),
            )
            for t in data.topics
        ),
    )


@pytest.mark.parametrize("version", range(4, 13))
def test_the_frame_is_byte_equal_to_kios_encoding(version: int) -> None:
    rng = random.Random(version)
    for correlation_id in range(25):
        data = _random_response(rng)
        request = Request(ApiKey.FETCH, version, correlation_id, "c", None)
        expected = encode_response(request, _kio_body(version, data))
        assert encode_fetch_response(correlation_id, version, data).to_bytes() == expected


def test_a_slice_is_sent_from_the_file_and_outlives_the_segments_deletion(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"0123456789" * 10)
    fd = os.open(path, os.O_RDONLY)
    partition = PartitionResponse(0, 0, 5, 5, 0, None, OpenSlice(fd, 3, 20))
    data = FetchResponseData(0, [TopicResponse("t", [partition])])
    built = encode_fetch_response(7, 12, data)
    assert [type(p) for p in built.parts] == [bytes, OpenSlice, bytes]
    os.unlink(path)  # retention removed the segment meanwhile
    whole = built.to_bytes()
    assert b"3456789012" in whole and int.from_bytes(whole[:4], "big") == len(whole) - 4
    built.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def _open_fds(under: Path) -> int:
    """This process's descriptors open on files below ``under`` (other tests' threads may
    open and close descriptors of their own meanwhile)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        count += target.startswith(str(under))
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts descriptors in /proc")
def test_no_descriptor_is_left_open_by_answered_or_waiting_fetches_of_clients_that_go(
    tmp_path: Path,
) -> None:
    config = {"log.segment.bytes": str(1024 * 1024)}
    with serve(tmp_path, overrides=config) as server:
        assert server.manager is not None
        (log,) = server.manager.create_topic("t", 1)
        for i in range(20):
            log.append([Record(b"v" * 500, key=b"%d" % i)])
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        for round_ in range(11):
            if round_ == 1:  # the first read opens the segment's reader for good
                before = _open_fds(tmp_path)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                answered = fetch_body(12, "t", 0, offset=round_ % 20)
                sock.sendall(frame(1, 12, answered, 1))
                assert read_frame(sock)
                # a long poll the client abandons: the socket closes while it waits
                # (it finds data, but less than min_bytes: each try's slices must be let go)
                waiting = fetch_body(12, "t", 0, offset=0, min_bytes=10**7, max_wait_ms=5000)
                sock.sendall(frame(1, 12, waiting, 2))
                time.sleep(0.3)  # the server is waiting on it when the client goes
        for _ in range(50):  # the abandoned waits end as their connections close
            if _open_fds(tmp_path) <= before:
                break
            time.sleep(0.1)
        assert _open_fds(tmp_path) <= before


def test_a_broker_fetch_holds_descriptors_until_closed(tmp_path: Path) -> None:
    """Records larger than a copy are sent from the file, through a descriptor the answer
    holds until it is closed (smaller ones are copied: test_server_descriptors.py)."""
    from kafkalog.server.fetch import COPY_AT_MOST_BYTES

    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1, LogConfig().to_properties(only_overrides=True))
        manager.get_log("t", 0).append([Record(b"x" * (COPY_AT_MOST_BYTES + 1))])
        broker.fetch(as_request(1, 12, fetch_body(12, "t", 0, offset=0))).close()
        before = _open_fds(tmp_path)
        result = broker.fetch(as_request(1, 12, fetch_body(12, "t", 0, offset=0)))
        assert _open_fds(tmp_path) == before + 1
        result.close()
        result.close()  # twice is harmless
        assert _open_fds(tmp_path) == before
