"""The protocol core of ``kafkalog serve`` without sockets: framing, header versions, the
ApiVersions rules, and each API's answers and Kafka error codes, driven with kio requests."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog import Record
from kafkalog.errors import CorruptCheckpointError
from kafkalog.protocol.fetch_frame import encode_fetch_response
from kafkalog.protocol.wire import (
    FrameReader,
    InvalidRequestError,
    decode_request,
    encode_response,
    make,
    unsupported_api_versions,
)
from kafkalog.server.apis import SUPPORTED_VERSIONS, Broker
from kafkalog.server.producer_ids import BLOCK_SIZE, FILE_NAME, FIRST_ID, ProducerIdManager
from server_helpers import (
    MS,
    api_versions_request,
    as_request,
    batch,
    broker_over,
    decode_response,
    fetch_body,
    frame,
    metadata_request,
    produce_body,
    request_module,
)

pytestmark = pytest.mark.one_codec

# --- framing ----------------------------------------------------------------------------------


def test_frames_are_cut_from_any_split_of_the_stream() -> None:
    a = frame(18, 0, api_versions_request(0), 1)
    b = frame(
        18,
        3,
        api_versions_request(3),
        2,
    )
    stream = a + b
    for cut in range(len(stream) + 1):
        reader = FrameReader(1 << 20)
        got = []
        for part in (stream[:cut], stream[cut:]):
            reader.feed(part)
            while (f := reader.next_frame()) is not None:
                got.append(f)
        assert got == [a[4:], b[4:]]
        assert reader.pending == 0


@pytest.mark.parametrize("size", [-1, 101])
def test_a_frame_over_the_limit_or_negative_is_refused(size: int) -> None:
    reader = FrameReader(100)
    reader.feed(struct.pack(">i", size))
    with pytest.raises(InvalidRequestError, match=r"socket\.request\.max\.bytes|negative"):
        reader.next_frame()


def test_unknown_keys_and_unserved_versions_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="unknown or unsupported API key 999"):
        decode_request(struct.pack(">hhi", 999, 0, 1), SUPPORTED_VERSIONS)
    with pytest.raises(InvalidRequestError, match="version 2 is not supported"):
        decode_request(struct.pack(">hhi", 0, 2, 1) + b"\0" * 20, SUPPORTED_VERSIONS)
    with pytest.raises(InvalidRequestError, match="has no header"):
        decode_request(b"\0\1", SUPPORTED_VERSIONS)


def test_truncated_requests_are_refused_and_trailing_bytes_ignored() -> None:
    """Kafka's parser reads a request's fields and ignores what follows them; librdkafka's
    Metadata v12 request for all topics (AdminClient.list_topics) carries three such bytes,
    the frame below being the one it sends."""
    whole = frame(
        3,
        12,
        metadata_request(12, allow=True),
    )[4:]
    for cut in range(8, len(whole)):
        with pytest.raises(InvalidRequestError):
            decode_request(whole[:cut], SUPPORTED_VERSIONS)
    assert decode_request(whole + b"\0", SUPPORTED_VERSIONS).body.allow_auto_topic_creation
    librdkafka = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    request = decode_request(librdkafka, SUPPORTED_VERSIONS)
    assert (request.client_id, request.body.topics) == ("rdkafka", None)


def _legacy_request(api_key: int, version: int, body: bytes) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, 4) + b"test" + body


@pytest.mark.parametrize(
    ("api_key", "version", "body", "field"),
    [
        (10, 0, b"\xff\xff", "key"),  # FindCoordinator's group id as a null string
        (10, 3, b"\0" + b"\0\0\0", "key"),  # flexible: header tags, then a compact null
        (2, 1, struct.pack(">iih", -1, 1, 1) + b"t" + struct.pack(">i", -1), "partitions"),
        (15, 0, struct.pack(">ih", 1, -1), "groups"),  # a null element of DescribeGroups
    ],
)
def test_a_null_where_the_schema_forbids_one_is_refused(
    api_key: int, version: int, body: bytes, field: str
) -> None:
    """Kafka's generated readers refuse these; kio would read them as None."""
    with pytest.raises(InvalidRequestError, match=f"non-nullable field {field} was serialized"):
        decode_request(_legacy_request(api_key, version, body), SUPPORTED_VERSIONS)


def test_a_null_where_the_schema_allows_one_is_read_as_none() -> None:
    request = decode_request(_legacy_request(3, 1, struct.pack(">i", -1)), SUPPORTED_VERSIONS)
    assert request.body.topics is None  # Metadata v1+: every topic


def test_an_api_versions_request_of_an_unknown_version_gets_the_v0_answer() -> None:
    """KIP-511: the broker answers from the header alone, with UNSUPPORTED_VERSION, version 0
    and header version 0, so a newer client retries with a version the broker knows."""
    request = decode_request(struct.pack(">hhi", 18, 99, 42) + b"garbage", SUPPORTED_VERSIONS)
    assert request.body is None and request.correlation_id == 42
    data = unsupported_api_versions(request, SUPPORTED_VERSIONS)
    assert struct.unpack_from(">i", data, 4)[0] == 42
    body = decode_response(18, 0, data, header_v1=False)
    assert body.error_code == ErrorCode.unsupported_version
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == SUPPORTED_VERSIONS


def test_api_versions_responses_keep_header_version_0_even_when_flexible(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        request = as_request(
            18,
            3,
            api_versions_request(3),
        )
        data = encode_response(request, broker.handle(request))
        body = decode_response(18, 3, data, header_v1=False)
        assert body.error_code == ErrorCode.none
        served = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert served == SUPPORTED_VERSIONS
        # a flexible non-ApiVersions response carries the tagged-field byte of header v1
        meta = as_request(
            3,
            12,
            metadata_request(12, allow=False),
        )
        decode_response(3, 12, encode_response(meta, broker.handle(meta)), header_v1=True)


# --- metadata and topics ------------------------------------------------------------------------


def _metadata(broker, version: int, topics: list[str] | None, allow: bool = True):  # type: ignore[no-untyped-def]
    body = metadata_request(version, topics, allow)
    request = as_request(3, version, body)
    return decode_response(
        3, version, encode_response(request, broker.handle(request)), header_v1=version >= 9
    )


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_metadata_auto_creates_a_missing_topic_when_allowed(tmp_path: Path, version: int) -> None:
    broker, manager = broker_over(tmp_path, **{"num.partitions": "3"})
    with manager:
        answer = _metadata(broker, version, ["fresh"])
        (topic,) = answer.topics
        assert topic.error_code == ErrorCode.none and topic.name == "fresh"
        assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
        assert all(p.leader_id == 1 and tuple(p.replica_nodes) == (1,) for p in topic.partitions)
        assert manager.topics() == {"fresh": 3}
        (node,) = answer.brokers
        assert node.node_id == 1
        if version >= 10:
            assert topic.topic_id.int != 0


def test_metadata_gives_each_partitions_latest_leader_epoch(tmp_path: Path) -> None:
    """A directory a Kafka broker wrote keeps its epochs: Metadata says the latest, as the
    consumer that committed an offset at that epoch waits for (older metadata is stale)."""
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 2)
        manager.get_log("t", 1).append([Record(b"a")], leader_epoch=3)
        manager.get_log("t", 1).append([Record(b"b")])  # no epoch given: it stays at 3
        (topic,) = _metadata(broker, 12, ["t"]).topics
        assert [p.leader_epoch for p in topic.partitions] == [0, 3]
        assert manager.get_log("t", 1).leader_epochs() == [(3, 0)]


def test_metadata_answers_in_topics_not_partitions_and_follows_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repeated all-topics Metadata looks at no partition (the entries answered last are kept
    while no topic, partition or leader epoch changed); each such change shows in the next."""
    from kafkalog.server import metadata

    broker, manager = broker_over(tmp_path)
    built: list[str] = []
    build = metadata._build_topic_entry
    monkeypatch.setattr(
        metadata,
        "_build_topic_entry",
        lambda ctx, mod, topic, *a: built.append(topic) or build(ctx, mod, topic, *a),
    )

    def answer() -> dict[str, tuple[Any, list[int]]]:
        return {
            t.name: (t.topic_id, [p.leader_epoch for p in t.partitions])
            for t in _metadata(broker, 12, None).topics
        }

    with manager:
        manager.create_topic("a", 2)
        manager.create_topic("b", 1)
        first = answer()
        assert {t: e for t, (_, e) in first.items()} == {"a": [0, 0], "b": [0]} and built
        built.clear()
        assert answer() == first and built == []  # nothing changed: no partition looked at
        manager.get_log("a", 1).append([Record(b"x")], leader_epoch=4)
        assert answer()["a"][1] == [0, 4]
        manager.create_partitions("b", 3)
        assert answer()["b"][1] == [0, 0, 0]
        manager.truncate_to("a", 1, 0)  # the epoch's only batch gone: back to 0
        assert answer()["a"][1] == [0, 0]
        old_id = answer()["b"][0]
        manager.delete_topic("b")
        assert set(answer()) == {"a"}
        manager.create_topic("b", 1)
        assert answer()["b"][0] != old_id  # a new topic under the old name: its own id
        built.clear()
        answer()
        assert built == []


def test_metadata_marks_kafkas_internal_topics(tmp_path: Path) -> None:
    """Kafka's Topic.INTERNAL_TOPICS are flagged internal (consumers leave them out of pattern
    subscriptions); any other topic is not."""
    broker, manager = broker_over(tmp_path)
    with manager:
        names = ["__consumer_offsets", "__transaction_state", "__share_group_state", "_t"]
        for name in names:
            manager.create_topic(name, 1)
        answer = _metadata(broker, 12, names)
        assert {t.name: t.is_internal for t in answer.topics} == {
            "__consumer_offsets": True,
            "__transaction_state": True,
            "__share_group_state": True,
            "_t": False,
        }


def test_metadata_does_not_create_when_disabled_or_not_allowed(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path, **{"auto.create.topics.enable": "false"})
    with manager:
        (topic,) = _metadata(broker, 12, ["nope"]).topics
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
    broker, manager = broker_over(tmp_path / "b")
    with manager:
        (topic,) = _metadata(broker, 12, ["nope"], allow=False).topics
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
        (topic,) = _metadata(broker, 12, ["bad/name"]).topics
        assert topic.error_code == ErrorCode.invalid_topic_exception
        assert manager.topics() == {}


def _creatable(mod, name: str, partitions: int = 1, rf: int = -1, **configs: str):  # type: ignore[no-untyped-def]
    return make(
        mod,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=(),
        configs=tuple(
            make(mod, "CreatableTopicConfig", name=k, value=v) for k, v in configs.items()
        ),
    )


def _create_many(broker, version: int, topics: list[tuple[str, int]]):  # type: ignore[no-untyped-def]
    mod = request_module(19, version)
    body = make(
        mod,
        "CreateTopicsRequest",
        topics=tuple(_creatable(mod, name, count) for name, count in topics),
        timeout=1000 * MS,
        validate_only=False,
    )
    request = as_request(19, version, body)
    return decode_response(
        19, version, encode_response(request, broker.handle(request)), header_v1=version >= 5
    ).topics


def _create(broker, version: int, name: str, partitions: int = 1, rf: int = -1, **configs: str):  # type: ignore[no-untyped-def]
    mod = request_module(19, version)
    topic = _creatable(mod, name, partitions, rf, **configs)
    body = make(mod, "CreateTopicsRequest", topics=(topic,), timeout=1000 * MS, validate_only=False)
    request = as_request(19, version, body)
    (result,) = decode_response(
        19, version, encode_response(request, broker.handle(request)), header_v1=version >= 5
    ).topics
    return result


def test_create_topics_answers_with_kafka_error_codes(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        made = _create(broker, 7, "t", 2, **{"cleanup.policy": "compact"})
        assert made.error_code == ErrorCode.none and made.num_partitions == 2
        assert manager.topic_overrides("t") == {"cleanup.policy": "compact"}
        assert _create(broker, 7, "t").error_code == ErrorCode.topic_already_exists
        assert _create(broker, 2, "u", rf=3).error_code == ErrorCode.invalid_replication_factor
        assert _create(broker, 7, "u", 0).error_code == ErrorCode.invalid_partitions
        bad = _create(broker, 7, "u", **{"segment.bytes": "x"})
        assert bad.error_code == ErrorCode.invalid_config and "segment.bytes" in bad.error_message
        assert _create(broker, 7, "a" * 250).error_code == ErrorCode.invalid_topic_exception
        kraft = _create(broker, 7, "__cluster_metadata")  # a KRaft node's metadata log
        assert kraft.error_code == ErrorCode.invalid_request
        assert kraft.error_message == "Creation of internal topic __cluster_metadata is prohibited."
        assert manager.topics() == {"t": 2}


def test_create_topics_answers_each_topic_of_a_batch_and_refuses_a_name_given_twice(
    tmp_path: Path,
) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        asked = [("a", 2), ("t", 1), ("dup", 1), ("b", 3), ("dup", 2), ("bad/name", 1), ("z", 0)]
        results = {r.name: r for r in _create_many(broker, 7, asked)}
        assert sorted(results) == ["a", "b", "bad/name", "dup", "t", "z"]
        assert (results["a"].error_code, results["a"].num_partitions) == (ErrorCode.none, 2)
        assert (results["b"].error_code, results["b"].num_partitions) == (ErrorCode.none, 3)
        assert results["t"].error_code == ErrorCode.topic_already_exists
        assert results["t"].error_message == "Topic 't' already exists."
        assert results["dup"].error_code == ErrorCode.invalid_request  # as Kafka's ControllerApis
        assert results["dup"].error_message == "Duplicate topic name."
        assert results["bad/name"].error_code == ErrorCode.invalid_topic_exception
        assert results["z"].error_code == ErrorCode.invalid_partitions
        assert manager.topics() == {"a": 2, "b": 3, "t": 1}
        assert results["a"].topic_id != results["b"].topic_id


# --- produce ------------------------------------------------------------------------------------


def _produce(broker, topic: str, records: bytes | None, version: int = 9, acks: int = -1):  # type: ignore[no-untyped-def]
    request = as_request(0, version, produce_body(version, topic, 0, records, acks))
    answer = broker.handle(request)
    if answer is None:
        return None
    body = decode_response(0, version, encode_response(request, answer), header_v1=version >= 9)
    return body.responses[0].partition_responses[0]


def test_produce_appends_and_maps_each_failure_to_kafkas_code(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path, **{"message.max.bytes": "2000"})
    with manager:
        manager.create_topic("t", 1)
        ok = _produce(broker, "t", batch([Record(b"v1", b"k"), Record(b"v2")]))
        assert ok.error_code == ErrorCode.none and ok.base_offset == 0
        assert _produce(broker, "t", batch([Record(b"v3")]), version=3).base_offset == 2
        assert _produce(broker, "missing", batch([Record(b"x")])).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        damaged = bytearray(batch([Record(b"abcdef")]))
        damaged[-2] ^= 0xFF
        assert _produce(broker, "t", bytes(damaged)).error_code == ErrorCode.corrupt_message
        big = _produce(broker, "t", batch([Record(b"x" * 5000)]))
        assert big.error_code == ErrorCode.message_too_large
        assert _produce(broker, "t", batch([Record(b"x")]), acks=2).error_code == (
            ErrorCode.invalid_required_acks
        )
        assert _produce(broker, "t", batch([Record(b"quiet")]), acks=0) is None
        log = manager.get_log("t", 0)
        assert [r.value for r in log.read_records(0)] == [b"v1", b"v2", b"v3", b"quiet"]


def test_idempotent_retries_are_answered_with_the_original_offsets(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        pid = broker.context.producer_ids.generate()
        first = batch(
            [Record(b"a"), Record(b"b")], producer_id=pid, producer_epoch=0, base_sequence=0
        )
        assert _produce(broker, "t", first).base_offset == 0
        retry = _produce(broker, "t", first)
        assert retry.error_code == ErrorCode.none and retry.base_offset == 0
        gap = batch([Record(b"c")], producer_id=pid, producer_epoch=0, base_sequence=5)
        assert _produce(broker, "t", gap).error_code == ErrorCode.out_of_order_sequence_number
        assert manager.get_log("t", 0).log_end_offset == 2


# --- fetch and list offsets ----------------------------------------------------------------------


def _fetch(broker, version: int = 12, final: bool = False, **kw):  # type: ignore[no-untyped-def]
    request = as_request(1, version, fetch_body(version, "t", 0, **kw))
    result = broker.fetch(request, final=final)
    frame = encode_fetch_response(request.correlation_id, version, result.response)
    try:
        body = decode_response(1, version, frame.to_bytes(), header_v1=version >= 12)
    finally:
        frame.close()
    return result, body.responses[0].partitions[0]


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_sends_the_segment_bytes_as_they_are(tmp_path: Path, version: int) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append([Record(b"a"), Record(b"b")])
        log.append([Record(b"c")])
        result, part = _fetch(broker, version, offset=1)
        assert result.satisfied and part.error_code == ErrorCode.none
        assert part.high_watermark == 3
        on_disk = (log.directory / "00000000000000000000.log").read_bytes()
        assert bytes(part.records) == on_disk  # the batch holding offset 1, whole, then the next
        _, small = _fetch(broker, version, offset=0, max_bytes=10)
        assert len(small.records) > 10  # KIP-74: the first batch is sent whole


def test_fetch_errors_and_waiting(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append([Record(b"a")])
        _, out_of_range = _fetch(broker, offset=5)
        assert out_of_range.error_code == ErrorCode.offset_out_of_range
        waiting, empty = _fetch(broker, offset=1, min_bytes=1, max_wait_ms=500)
        assert not waiting.satisfied and waiting.max_wait_ms == 500 and not empty.records
        done, _ = _fetch(broker, offset=1, min_bytes=1, max_wait_ms=500, final=True)
        assert done.satisfied
        enough, _ = _fetch(broker, offset=0, min_bytes=1, max_wait_ms=500)
        assert enough.satisfied


def test_read_committed_fetch_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    from kafkalog import ProducerFields

    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append([Record(b"plain")])
        txn = ProducerFields(
            producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        log.append([Record(b"in-txn")], producer=txn)
        _, open_txn = _fetch(broker, offset=0, isolation=1)
        assert open_txn.last_stable_offset == 1 and open_txn.high_watermark == 2
        log.append_end_txn_marker(7, 0, "ABORT")
        _, done = _fetch(broker, offset=0, isolation=1)
        assert [(a.producer_id, a.first_offset) for a in done.aborted_transactions] == [(7, 1)]
        _, uncommitted = _fetch(broker, offset=0, isolation=0)
        assert uncommitted.aborted_transactions is None


def test_list_offsets_earliest_latest_and_by_time(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append([Record(b"a", timestamp=1000), Record(b"b", timestamp=2000)])
        mod = request_module(2, 7)

        def ask(ts: int) -> tuple[int, int, int]:
            body = make(
                mod,
                "ListOffsetsRequest",
                replica_id=-1,
                isolation_level=0,
                topics=(
                    make(
                        mod,
                        "ListOffsetsTopic",
                        name="t",
                        partitions=(
                            make(mod, "ListOffsetsPartition", partition_index=0, timestamp=ts),
                        ),
                    ),
                ),
            )
            request = as_request(2, 7, body)
            (p,) = (
                decode_response(
                    2, 7, encode_response(request, broker.handle(request)), header_v1=True
                )
                .topics[0]
                .partitions
            )
            return p.error_code, p.offset, p.timestamp

        assert ask(-2) == (ErrorCode.none, 0, -1)
        assert ask(-1) == (ErrorCode.none, 2, -1)
        assert ask(1500) == (ErrorCode.none, 1, 2000)
        assert ask(-3) == (ErrorCode.none, 1, 2000)
        assert ask(9999) == (ErrorCode.none, -1, -1)


def _describe_topic(broker: Broker, topic: str, resource_type: int = 2) -> dict[str, Any]:
    mod = request_module(32, 4)
    body = make(
        mod,
        "DescribeConfigsRequest",
        include_synonyms=True,
        include_documentation=False,
        resources=(
            make(
                mod,
                "DescribeConfigsResource",
                resource_type=resource_type,
                resource_name=topic,
                configuration_keys=None,
            ),
        ),
    )
    request = as_request(32, 4, body)
    (result,) = decode_response(
        32, 4, encode_response(request, broker.handle(request)), header_v1=True
    ).results
    return {c.name: c for c in result.configs}


def test_describe_configs_names_dynamic_broker_configs_as_kafka_does(tmp_path: Path) -> None:
    """A Kafka broker's run-time defaults (its metadata log): DYNAMIC_BROKER_CONFIG (2) for
    the node's own, DYNAMIC_DEFAULT_BROKER_CONFIG (3) for every broker's, listed before
    server.properties' STATIC_BROKER_CONFIG (4), as ConfigHelper lists synonyms."""
    from test_kraft_configs import _dynamic_broker_configs

    _dynamic_broker_configs(tmp_path, 1)
    broker, manager = broker_over(tmp_path, **{"log.retention.hours": "1"})
    with manager:
        manager.create_topic("t", 1)
        configs = _describe_topic(broker, "t")
    retention, segment = configs["retention.ms"], configs["segment.bytes"]
    assert (retention.value, retention.config_source) == (str(48 * 3600 * 1000), 3)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "172800000", 3),
        ("log.retention.hours", "1", 4),
        ("log.retention.hours", "168", 5),  # Kafka's default, under the key that has one
    ]
    assert (segment.value, segment.config_source) == ("2097152", 2)
    assert [(s.value, s.source) for s in segment.synonyms] == [
        ("2097152", 2),
        ("4194304", 3),
        ("1073741824", 5),
    ]


def test_a_broker_is_described_by_the_keys_kafka_changes_at_run_time(tmp_path: Path) -> None:
    """Broker 1: each key that sets a topic default, with Kafka's source and read-only flag,
    and each other key Kafka changes at run time; the empty name (every broker,
    ``--entity-default``): only those set so at run time."""
    from test_kraft_configs import _dynamic_broker_configs

    _dynamic_broker_configs(tmp_path, 1)
    broker, manager = broker_over(tmp_path, **{"log.retention.hours": "1"})
    with manager:
        node = _describe_topic(broker, "1", resource_type=4)
        every = _describe_topic(broker, "", resource_type=4)
    segment, hours = node["log.segment.bytes"], node["log.retention.hours"]
    assert (segment.value, segment.config_source, segment.read_only) == ("2097152", 2, False)
    assert (hours.value, hours.config_source, hours.read_only) == ("1", 4, True)
    assert node["log.retention.ms"].value == "172800000"
    assert node["log.roll.ms"].value is None and node["log.roll.ms"].config_source == 5
    assert "log.message.format.version" not in node and "node.id" not in node
    threads = node["num.io.threads"]
    assert (threads.value, threads.config_source, threads.read_only) == ("8", 5, False)
    assert {k: (c.value, c.config_source) for k, c in every.items()} == {
        "log.retention.ms": ("172800000", 3)  # log.segment.bytes: broker 1's own is above it
    }


def test_describe_configs_names_each_keys_source(tmp_path: Path) -> None:
    broker, manager = broker_over(
        tmp_path, **{"log.retention.hours": "48", "log.segment.bytes": "2097152"}
    )
    with manager:
        manager.create_topic("t", 1, {"cleanup.policy": "compact"})
        configs = _describe_topic(broker, "t")
        assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == (
            "compact",
            1,
        )
        # Kafka's ConfigHelper lists broker layers only from the first that sets the primary
        # synonym (log.retention.ms): one set by log.retention.hours alone reads as a default
        retention = configs["retention.ms"]
        assert (retention.value, retention.config_source, retention.synonyms) == (
            "172800000",
            5,
            (),
        )
        segment = configs["segment.bytes"]
        assert (segment.config_source, [s.name for s in segment.synonyms]) == (
            4,
            ["log.segment.bytes", "log.segment.bytes"],
        )
        assert [(s.value, s.source) for s in segment.synonyms] == [
            ("2097152", 4),
            ("1073741824", 5),
        ]
        jitter = configs["segment.jitter.ms"]  # only log.roll.jitter.hours has a default
        assert (jitter.config_source, jitter.synonyms) == (5, ())


# --- producer ids --------------------------------------------------------------------------------


def test_producer_ids_never_repeat_across_restarts(tmp_path: Path) -> None:
    first = ProducerIdManager([tmp_path])
    a = [first.generate() for _ in range(3)]
    assert a == [FIRST_ID, FIRST_ID + 1, FIRST_ID + 2]
    second = ProducerIdManager([tmp_path])  # as after a kill -9: the rest of the block is skipped
    assert second.generate() == FIRST_ID + BLOCK_SIZE
    assert (tmp_path / FILE_NAME).read_text() == f"0\n{FIRST_ID + 2 * BLOCK_SIZE}\n"


def test_producer_ids_start_far_above_the_ids_a_kafka_controller_hands_out(
    tmp_path: Path,
) -> None:
    """A Kafka controller counts from 0, a block at a time, and never learns of our ids: when
    the directory goes back to a Kafka broker, its new producers must not get ids ours have
    (their first batches would pass for retries of ours). A block file written before ids
    started at FIRST_ID moves up to it."""
    assert FIRST_ID >= 10**15 and FIRST_ID % BLOCK_SIZE == 0
    (tmp_path / FILE_NAME).write_text(f"0\n{5 * BLOCK_SIZE}\n")
    assert ProducerIdManager([tmp_path], in_use=[0, 4999]).generate() == FIRST_ID


def test_producer_ids_start_after_the_block_of_the_highest_id_in_use(tmp_path: Path) -> None:
    """Ids the directories hold (producer states, __transaction_state) are never handed out:
    the first id is the start of the block after the highest one in use, made durable."""
    ids = ProducerIdManager([tmp_path], in_use=[5, FIRST_ID + 1999, 7])
    assert ids.generate() == FIRST_ID + 2 * BLOCK_SIZE
    assert (tmp_path / FILE_NAME).read_text() == f"0\n{FIRST_ID + 3 * BLOCK_SIZE}\n"
    ids.reserve_above([FIRST_ID + 2 * BLOCK_SIZE + 500])  # found later (the transaction log)
    assert ids.generate() == FIRST_ID + 3 * BLOCK_SIZE
    assert (tmp_path / FILE_NAME).read_text() == f"0\n{FIRST_ID + 4 * BLOCK_SIZE}\n"
    ids.reserve_above([12, FIRST_ID + 3 * BLOCK_SIZE])  # nothing above what is handed out
    assert ids.generate() == FIRST_ID + 3 * BLOCK_SIZE + 1
    assert ProducerIdManager([tmp_path], in_use=[]).generate() == FIRST_ID + 4 * BLOCK_SIZE


def test_a_damaged_producer_id_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("0\nbanana\n")
    with pytest.raises(CorruptCheckpointError, match="damaged"):
        ProducerIdManager([tmp_path])


def test_produce_takes_exactly_one_magic_2_batch_per_partition(tmp_path: Path) -> None:
    """Kafka's ProduceRequest.validateRecords, per partition."""
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        two = batch([Record(b"a")]) + batch([Record(b"b")])
        assert _produce(broker, "t", two).error_code == ErrorCode.invalid_record
        legacy = batch([Record(b"old", timestamp=5)], magic=1)
        assert _produce(broker, "t", legacy).error_code == ErrorCode.invalid_record
        assert _produce(broker, "t", b"").error_code == ErrorCode.invalid_record
        zstd = batch([Record(b"z")], compression="zstd")
        assert _produce(broker, "t", zstd, version=6).error_code == (
            ErrorCode.unsupported_compression_type
        )
        assert _produce(broker, "t", zstd, version=7).error_code == ErrorCode.none
        assert manager.get_log("t", 0).log_end_offset == 1


def test_a_kraft_server_properties_gives_its_broker_listener(tmp_path: Path) -> None:
    """Kafka's sample KRaft file lists a CONTROLLER listener too; kafkalog runs no controller
    and serves the broker listeners, each with a name and port of its own, advertised by
    name (KafkaConfig's checks). A listener without what its protocol needs is refused."""
    from kafkalog.errors import InvalidConfigError
    from kafkalog.manager.server_config import ServerConfig
    from kafkalog.server.context import BrokerSettings, Listener

    def settings(**props: str) -> BrokerSettings:
        return BrokerSettings.from_server_config(
            ServerConfig.from_properties({"log.dirs": str(tmp_path), **props})
        )

    kraft = settings(listeners="PLAINTEXT://:9092,CONTROLLER://:9093")
    assert [(x.bind.host, x.bind.port) for x in kraft.listeners] == [("", 9092)]
    mapped = settings(
        listeners="CLIENTS://127.0.0.1:9094,CTRL://:9093",
        **{
            "controller.listener.names": "CTRL",
            "listener.security.protocol.map": "CLIENTS:PLAINTEXT,CTRL:PLAINTEXT",
        },
    )
    assert [(x.name, x.bind.host, x.bind.port) for x in mapped.listeners] == [
        ("CLIENTS", "127.0.0.1", 9094)
    ]
    with pytest.raises(InvalidConfigError, match="SASL_SSL listener needs a PEM key store"):
        settings(listeners="SASL_SSL://:9092")
    with pytest.raises(InvalidConfigError, match="'BOGUS' is not one of PLAINTEXT, SSL"):
        settings(listeners="BOGUS://:9092")
    two = settings(
        listeners="PLAINTEXT://:9092,INTERNAL://:9094",
        **{
            "advertised.listeners": "INTERNAL://broker.internal:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        },
    )
    assert [(x.name, x.advertised) for x in two.listeners] == [
        ("PLAINTEXT", None),
        ("INTERNAL", Listener("PLAINTEXT", "broker.internal", 9094, "INTERNAL")),
    ]
    with pytest.raises(InvalidConfigError, match="a name of its own"):
        settings(listeners="PLAINTEXT://:9092,PLAINTEXT://:9094")
    with pytest.raises(InvalidConfigError, match="a port of its own"):
        settings(
            listeners="PLAINTEXT://:9092,OTHER://:9092",
            **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"},
        )
    with pytest.raises(InvalidConfigError, match="does not: \\['ELSEWHERE'\\]"):
        settings(
            listeners="PLAINTEXT://:9092",
            **{
                "advertised.listeners": "ELSEWHERE://h:1",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,ELSEWHERE:PLAINTEXT",
            },
        )


def test_offset_for_leader_epoch_answers_from_the_epoch_cache(tmp_path: Path) -> None:
    broker, manager = broker_over(tmp_path)
    with manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append([Record(b"a"), Record(b"b")])
        mod = request_module(23, 4)

        def ask(topic: str, epoch: int, replica: int = -1) -> tuple[int, int, int]:
            body = make(
                mod,
                "OffsetForLeaderEpochRequest",
                replica_id=replica,
                topics=(
                    make(
                        mod,
                        "OffsetForLeaderTopic",
                        topic=topic,
                        partitions=(
                            make(
                                mod,
                                "OffsetForLeaderPartition",
                                partition=0,
                                current_leader_epoch=0,
                                leader_epoch=epoch,
                            ),
                        ),
                    ),
                ),
            )
            request = as_request(23, 4, body)
            answer = decode_response(
                23, 4, encode_response(request, broker.handle(request)), header_v1=True
            )
            (p,) = answer.topics[0].partitions
            return p.error_code, p.leader_epoch, p.end_offset

        assert ask("t", 0) == (ErrorCode.none, 0, 2)
        assert ask("t", 5) == (ErrorCode.none, -1, -1)
        assert ask("t", 0, replica=2)[0] == ErrorCode.not_leader_or_follower
        assert ask("missing", 0)[0] == ErrorCode.unknown_topic_or_partition


def test_an_array_longer_than_its_frame_is_refused_before_kio_parses_it() -> None:
    """kio reserves an array's declared length before reading it: this 28-byte Metadata v11
    body (found by the fuzz test) declared billions of topics and the allocator aborted the
    process. The frame guard refuses it as a bad request, and passes real requests."""
    header = struct.pack(">hhih", 3, 11, 7, 4) + b"fuzz" + b"\x00"
    body = bytes.fromhex("a7abb9f645b4b4594460a61073fe96e8ea")
    with pytest.raises(InvalidRequestError, match="longer than the frame"):
        decode_request(header + body, SUPPORTED_VERSIONS)
    for key, version, request in (
        (3, 12, metadata_request(12, ["a", "b"], allow=True)),
        (3, 4, metadata_request(4, None)),
        (0, 9, produce_body(9, "t", 0, batch([Record(b"v", b"k")]))),
        (0, 3, produce_body(3, "t", 0, batch([Record(b"v")]))),
        (1, 12, fetch_body(12, "t", 0, 0)),
    ):
        decoded = decode_request(frame(key, version, request)[4:], SUPPORTED_VERSIONS)
        assert decoded.body == request


def test_a_response_field_no_version_has_is_an_error_not_dropped() -> None:
    """``make`` drops a field the version at hand lacks (one handler builds every version),
    but a name no version of the message has is a mistake, found at once."""
    from kafkalog.protocol.wire import make, payload_module

    v3 = payload_module(0, 3, True)
    built = make(
        v3,
        "PartitionProduceResponse",
        index=0,
        error_code=0,
        base_offset=5,
        log_append_time=None,
        log_start_offset=0,
        record_errors=(),
        error_message=None,
    )
    assert built.base_offset == 5 and not hasattr(built, "record_errors")  # v8+ only
    with pytest.raises(TypeError, match="error_mesage"):
        make(v3, "PartitionProduceResponse", index=0, error_code=0, error_mesage="typo")
