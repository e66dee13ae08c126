"""The records of ``__remote_log_metadata`` (KIP-405) are Kafka's: the bytes Kafka 4.3.1's
RemoteLogMetadataSerde writes for the same metadata, read back by it unchanged, its
partitioner's choice of metadata partition, its state-transition rules, and, for damaged
values, a refusal exactly where Kafka refuses."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, TOOL_LOG, classpath
from kafkalog.errors import CorruptRecordError, InvalidArgumentError
from kafkalog.records.remote_log_metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    decode,
    decode_record,
    describe,
    encode,
    encode_record,
    metadata_partition,
    partition_delete_transition_allowed,
    segment_transition_allowed,
)
from kafkalog.types import uuid_string

pytestmark = pytest.mark.one_codec  # records of their own format: the codec is not involved

ROOT = Path(__file__).resolve().parent.parent
TP = TopicIdPartition("3JPMkBTsTzGbV7ZVXmQGrg", "orders", 7)
SEGMENT = RemoteLogSegmentId(TP, "mQk3kM5eSBSlfmU6r1wP-Q")


def _segment(**changes: object) -> RemoteLogSegmentMetadata:
    base = RemoteLogSegmentMetadata(
        SEGMENT, 100, 199, 1_700_000_000_123, 1, 1_700_000_001_000, 4096, ((0, 100), (3, 150))
    )
    return RemoteLogSegmentMetadata(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_each_kind_round_trips_and_starts_with_the_serdes_frame() -> None:
    for metadata in (
        _segment(),
        _segment(
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            custom_metadata=b"\x01\x02",
            txn_index_empty=True,
        ),
        RemoteLogSegmentMetadataUpdate(SEGMENT, 5, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 2),
        RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 9, 1),
        RemoteLogSegmentMetadataSnapshot(
            SEGMENT.id, 5, 4, -1, 0, 0, 0, ((1, 0),), RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ),
    ):
        value = encode(metadata)
        assert decode(value) == metadata
        assert value[0] == 1  # frame version 1, then the api key, then version 0
        assert value[2] == 0


def test_leader_epochs_are_written_by_epoch_and_a_repeated_one_keeps_the_last() -> None:
    unsorted = _segment(segment_leader_epochs=((3, 150), (0, 100)))
    assert decode(encode(unsorted)).segment_leader_epochs == ((0, 100), (3, 150))  # type: ignore[union-attr]
    name, fields = decode_record(encode(_segment()))
    fields["segmentLeaderEpochs"] = [
        {"leaderEpoch": 1, "offset": 100},
        {"leaderEpoch": 1, "offset": 120},
    ]
    value = encode_record(name, fields)
    assert decode(value).segment_leader_epochs == ((1, 120),)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"start_offset": -1}, "negative"),
        ({"end_offset": 99}, "below its start"),
        ({"segment_leader_epochs": ()}, "at least one leader epoch"),
    ],
)
def test_a_segment_kafka_would_not_build_is_refused(changes: dict[str, object], why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why):
        encode(_segment(**changes))


def test_damaged_frames_are_refused() -> None:
    value = encode(_segment())
    with pytest.raises(CorruptRecordError, match="frame version 0"):
        decode(b"\x00" + value[1:])
    with pytest.raises(CorruptRecordError, match="unknown type 9"):
        decode(value[:1] + b"\x09" + value[2:])
    with pytest.raises(CorruptRecordError, match="version 1"):
        decode(value[:2] + b"\x01" + value[3:])
    with pytest.raises(CorruptRecordError, match="1 byte"):
        decode(value + b"\x00")
    for cut in range(len(value)):
        with pytest.raises(CorruptRecordError):
            decode(value[:cut])


def test_the_state_rules() -> None:
    s, p = RemoteLogSegmentState, RemotePartitionDeleteState
    assert segment_transition_allowed(None, s.COPY_SEGMENT_STARTED)
    assert not segment_transition_allowed(None, s.COPY_SEGMENT_FINISHED)
    assert segment_transition_allowed(s.COPY_SEGMENT_STARTED, s.DELETE_SEGMENT_STARTED)
    assert not segment_transition_allowed(s.COPY_SEGMENT_FINISHED, s.COPY_SEGMENT_STARTED)
    assert not segment_transition_allowed(s.DELETE_SEGMENT_FINISHED, s.DELETE_SEGMENT_STARTED)
    assert segment_transition_allowed(s.DELETE_SEGMENT_FINISHED, s.DELETE_SEGMENT_FINISHED)
    assert partition_delete_transition_allowed(None, p.DELETE_PARTITION_MARKED)
    assert not partition_delete_transition_allowed(
        p.DELETE_PARTITION_MARKED, p.DELETE_PARTITION_FINISHED
    )


_IDS = st.binary(min_size=16, max_size=16).map(uuid_string)
_TPS = st.builds(
    TopicIdPartition, _IDS, st.text("abc-_.", min_size=1, max_size=12), st.integers(0, 2**31 - 1)
)
_SEGMENT_IDS = st.builds(RemoteLogSegmentId, _TPS, _IDS)
_CUSTOM = st.none() | st.binary(max_size=20)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_INT32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def _segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 2**62))
    epochs = draw(
        st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**62), min_size=1, max_size=4)
    )
    return RemoteLogSegmentMetadata(
        draw(_SEGMENT_IDS),
        start,
        start + draw(st.integers(0, 2**40)),
        draw(_INT64),
        draw(_INT32),
        draw(_INT64),
        draw(_INT32),
        tuple(sorted(epochs.items())),
        draw(st.sampled_from(RemoteLogSegmentState)),
        draw(_CUSTOM),
        draw(st.booleans()),
    )


_METADATA: st.SearchStrategy[RemoteLogMetadata] = st.one_of(
    _segments(),
    st.builds(
        RemoteLogSegmentMetadataUpdate,
        _SEGMENT_IDS,
        _INT64,
        st.sampled_from(RemoteLogSegmentState),
        _INT32,
        _CUSTOM,
    ),
    st.builds(
        RemotePartitionDeleteMetadata,
        _TPS,
        st.sampled_from(RemotePartitionDeleteState),
        _INT64,
        _INT32,
    ),
    _segments().map(
        lambda m: RemoteLogSegmentMetadataSnapshot(
            m.segment_id.id,
            m.start_offset,
            m.end_offset,
            m.max_timestamp_ms,
            m.broker_id,
            m.event_timestamp_ms,
            m.segment_size_in_bytes,
            m.segment_leader_epochs,
            m.state,
            m.custom_metadata,
            m.txn_index_empty,
        )
    ),
)


@given(_METADATA)
def test_every_record_round_trips(metadata: RemoteLogMetadata) -> None:
    assert decode(encode(metadata)) == metadata


def test_the_partitioner_spreads_and_refuses_no_partitions() -> None:
    rng = random.Random(405)
    seen = {metadata_partition(uuid_string(rng.randbytes(16)), p, 50) for p in range(400)}
    assert len(seen) > 40 and max(seen) < 50
    with pytest.raises(InvalidArgumentError):
        metadata_partition(TP.topic_id, 0, 0)


# --- against Kafka 4.3.1's own serde ------------------------------------------------------------


def _kafka(lines: list[str]) -> list[str]:
    program = str(ROOT / "interop" / "RemoteLogMetadataOracle.java")
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(KAFKA_VERSIONS[-1]), program]
    proc = subprocess.run(
        cmd,
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = proc.stdout.splitlines()
    assert len(answers) == len(lines)
    return answers


def _case(m: RemoteLogMetadata) -> str:
    """The oracle's line that builds ``m`` with Kafka's own classes."""

    def custom(c: bytes | None) -> str:
        return "-" if c is None else c.hex()

    if isinstance(m, RemoteLogSegmentMetadata):
        s, tp = m.segment_id, m.segment_id.topic_id_partition
        epochs = ",".join(f"{e}:{o}" for e, o in m.segment_leader_epochs)
        return (
            f"S {tp.topic_id} {tp.topic} {tp.partition} {s.id} {m.start_offset} "
            f"{m.end_offset} {m.max_timestamp_ms} {m.broker_id} {m.event_timestamp_ms} "
            f"{m.segment_size_in_bytes} {epochs} {int(m.state)} {custom(m.custom_metadata)} "
            f"{str(m.txn_index_empty).lower()}"
        )
    if isinstance(m, RemoteLogSegmentMetadataSnapshot):
        epochs = ",".join(f"{e}:{o}" for e, o in m.segment_leader_epochs)
        return (
            f"N {m.segment_id} {m.start_offset} {m.end_offset} {m.max_timestamp_ms} "
            f"{m.broker_id} {m.event_timestamp_ms} {m.segment_size_in_bytes} {epochs} "
            f"{int(m.state)} {custom(m.custom_metadata)} {str(m.txn_index_empty).lower()}"
        )
    if isinstance(m, RemoteLogSegmentMetadataUpdate):
        s, tp = m.segment_id, m.segment_id.topic_id_partition
        return (
            f"U {tp.topic_id} {tp.topic} {tp.partition} {s.id} {m.event_timestamp_ms} "
            f"{int(m.state)} {m.broker_id} {custom(m.custom_metadata)}"
        )
    tp = m.topic_id_partition
    return (
        f"X {tp.topic_id} {tp.topic} {tp.partition} {int(m.state)} {m.event_timestamp_ms} "
        f"{m.broker_id}"
    )


def _random_metadata(rng: random.Random) -> RemoteLogMetadata:
    tp = TopicIdPartition(
        uuid_string(rng.randbytes(16)),
        rng.choice(["t", "orders", "a.b-c_d"]),
        rng.randrange(0, 2**31),
    )
    sid = RemoteLogSegmentId(tp, uuid_string(rng.randbytes(16)))
    custom = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 30))])
    kind = rng.randrange(4)
    if kind in (0, 3):
        start = rng.randrange(0, 2**50)
        epochs = {
            rng.randrange(0, 2**20): rng.randrange(0, 2**50) for _ in range(rng.randrange(1, 4))
        }
        segment = RemoteLogSegmentMetadata(
            sid,
            start,
            start + rng.randrange(0, 2**20),
            rng.randrange(-1, 2**45),
            rng.randrange(0, 100),
            rng.randrange(0, 2**45),
            rng.randrange(0, 2**31),
            tuple(sorted(epochs.items())),
            rng.choice(list(RemoteLogSegmentState)),
            custom,
            rng.random() < 0.5,
        )
        if kind == 0:
            return segment
        return RemoteLogSegmentMetadataSnapshot(
            sid.id,
            *(
                getattr(segment, f)
                for f in (
                    "start_offset",
                    "end_offset",
                    "max_timestamp_ms",
                    "broker_id",
                    "event_timestamp_ms",
                    "segment_size_in_bytes",
                    "segment_leader_epochs",
                    "state",
                    "custom_metadata",
                    "txn_index_empty",
                )
            ),
        )  # type: ignore[arg-type]
    if kind == 1:
        return RemoteLogSegmentMetadataUpdate(
            sid,
            rng.randrange(0, 2**45),
            rng.choice(list(RemoteLogSegmentState)),
            rng.randrange(0, 100),
            custom,
        )
    return RemotePartitionDeleteMetadata(
        tp,
        rng.choice(list(RemotePartitionDeleteState)),
        rng.randrange(0, 2**45),
        rng.randrange(0, 100),
    )


@pytest.mark.kafka
def test_kafkas_serde_writes_our_bytes_reads_ours_and_partitions_as_we_do() -> None:
    """300 seeded metadata of the four kinds built by Kafka's classes: Kafka's bytes are ours,
    it reads ours, writes them again unchanged and prints them as ``describe`` does (what
    kafka-dump-log --remote-log-metadata-decoder shows), and we read its; 300 seeded
    topic-partitions land on the same metadata partition (of 1, 7 and 50); every state
    transition is judged alike."""
    rng = random.Random(405)
    metadata = [_random_metadata(rng) for _ in range(300)]
    placements = [
        (uuid_string(rng.randbytes(16)), rng.randrange(0, 2**31), rng.choice([1, 7, 50]))
        for _ in range(300)
    ]
    transitions = [
        (kind, src, dst)
        for kind, states in (("s", RemoteLogSegmentState), ("p", RemotePartitionDeleteState))
        for src in [None, *states]
        for dst in states
    ]
    lines = [_case(m) for m in metadata]
    lines += [f"D {encode(m).hex()}" for m in metadata]
    lines += [f"P {t} {p} {n}" for t, p, n in placements]
    lines += [f"T {k} {'-' if s is None else int(s)} {int(d)}" for k, s, d in transitions]
    answers = iter(_kafka(lines))
    for m in metadata:
        theirs = next(answers)
        assert theirs == encode(m).hex(), m
        assert decode(bytes.fromhex(theirs)) == m
    for m in metadata:
        again, text = next(answers).split("\t")
        assert again == encode(m).hex(), m
        assert text == describe(m)
    for t, p, n in placements:
        assert int(next(answers)) == metadata_partition(t, p, n), (t, p, n)
    for kind, src, dst in transitions:
        rule = segment_transition_allowed if kind == "s" else partition_delete_transition_allowed
        assert next(answers) == str(rule(src, dst)).lower(), (kind, src, dst)  # type: ignore[arg-type]


@pytest.mark.kafka
def test_a_damaged_value_is_refused_exactly_where_kafka_refuses_it() -> None:
    """Every truncation of three records and 600 seeded byte changes: Kafka's serde and ours
    accept and refuse the same values, and what both accept reads the same."""
    rng = random.Random(4051)
    sources = [encode(_random_metadata(rng)) for _ in range(3)]
    damaged = [v[:cut] for v in sources for cut in range(len(v))]
    for _ in range(600):
        value = bytearray(rng.choice(sources))
        at = rng.randrange(len(value))
        value[at] = rng.choice([0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        damaged.append(bytes(value))
    answers = _kafka([f"D {v.hex()}" for v in damaged])
    for value, theirs in zip(damaged, answers, strict=True):
        try:
            ours = decode(value)
        except CorruptRecordError:
            assert theirs.startswith("ERR"), (value.hex(), theirs)
            continue
        assert not theirs.startswith("ERR"), (value.hex(), ours)
        assert decode(bytes.fromhex(theirs.split("\t")[0])) == ours, value.hex()


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_dump_log_prints_a_remote_log_metadata_segment_as_kafka_does(
    tmp_path: Path, version: str
) -> None:
    """A segment of ``__remote_log_metadata`` records (null keys, seeded metadata of the four
    kinds), through kafka-dump-log --remote-log-metadata-decoder and ours."""
    from kafkalog import Log, LogConfig, Record
    from test_kafka_oracle_dump import first_difference, kafka_dump, kafkalog_dump

    rng = random.Random(7)
    with Log.open(tmp_path / "__remote_log_metadata-0", LogConfig()) as log:
        for _ in range(4):
            batch = [_random_metadata(rng) for _ in range(rng.randrange(1, 6))]
            log.append([Record(encode(m), None, timestamp=1_700_000_000_000) for m in batch])
    segment = [str(tmp_path / "__remote_log_metadata-0" / "00000000000000000000.log")]
    major_minor = ".".join(version.split(".")[:2])
    for options in (
        ("--remote-log-metadata-decoder",),
        ("--remote-log-metadata-decoder", "--skip-record-metadata"),
    ):
        want, _ = kafka_dump(version, segment, options)
        got, _ = kafkalog_dump(segment, options, "--kafka-version", major_minor)
        assert got == want, (options, first_difference(want, got))
