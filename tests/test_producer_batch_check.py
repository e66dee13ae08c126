"""The leader's check of a producer's batch: the compiled walk (``_producer_batch.c``, without
the GIL) and the pure-Python reference answer alike, and a Log appending through either gives
the same offsets, the same bytes and the same rejections as the full validation.

The compiled check only decides: for anything but a sound batch of the shape producers send it
answers None and the full path (``analyze``, ``assign_offsets``) judges and words the error.
So the properties are: the two checks agree on every input, damaged ones included; and two
Logs, one on each codec, agree on every append's outcome.
"""

from __future__ import annotations

import random
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog import ManualClock
from kafkalog.errors import CorruptRecordError, KafkaLogError
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.validator import check_producer_batch
from kafkalog.records import RecordBatchBuilder
from kafkalog.records import codec as codec_module
from kafkalog.records.batch import RecordBatchHeader
from kafkalog.records.codec import RecordCodec, compiled_codec
from kafkalog.types import CompressionType, TimestampType

pytestmark = [
    pytest.mark.one_codec,
    pytest.mark.skipif(compiled_codec() is None, reason="the _fastcodec extension is not built"),
]

NOW = 1_700_000_000_000
REFERENCE = RecordCodec()


def _compiled() -> RecordCodec:
    compiled = codec_module._COMPILED_CODEC
    assert compiled is not None
    return compiled


record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),  # key
    st.one_of(st.none(), st.binary(max_size=200)),  # value
    st.lists(
        st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
    ),
    st.one_of(st.none(), st.integers(NOW - 10**9, NOW + 10**9), st.just(-1)),
)


@st.composite
def producer_batches(draw: Any) -> bytes:
    lat = draw(st.booleans())
    pid, epoch, sequence = draw(st.sampled_from([(-1, -1, -1), (7, 0, 0), (7, 0, 5)]))
    builder = RecordBatchBuilder(
        compression=draw(st.sampled_from(list(CompressionType))),
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=pid >= 0 and draw(st.booleans()),
        log_append_time=NOW if lat else None,
    )
    for key, value, headers, ts in draw(st.lists(record, min_size=1, max_size=12)):
        builder.append(value, key, headers, ts)
    return builder.build()


@st.composite
def damaged(draw: Any) -> bytes:
    """A producer batch, then maybe one thing changed: a byte anywhere (the CRC then caught or,
    outside it, not), a header field with the CRC fixed, a cut or an extra tail."""
    data = bytearray(draw(producer_batches()))
    how = draw(st.sampled_from(["none", "byte", "field", "cut", "tail"]))
    if how == "byte":
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= draw(st.integers(1, 255))
    elif how == "field":
        at = draw(st.sampled_from([0, 16, 21, 22, 23, 26, 43, 53, 57, 60]))
        data[at] ^= draw(st.integers(1, 255))
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    elif how == "cut":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif how == "tail":
        data += draw(st.binary(min_size=1, max_size=70))
    if how != "none" and len(data) > 21 and draw(st.booleans()):  # damage the CRC then misses
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_the_compiled_check_answers_as_the_reference(data: bytes) -> None:
    expected = REFERENCE.producer_batch(data, RecordBatchHeader)
    got = _compiled().producer_batch(data, RecordBatchHeader)
    assert got == expected
    if got is not None:
        assert type(got[0]) is RecordBatchHeader


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=3000))
def test_the_compiled_crc_is_crc32c(payload: bytes) -> None:
    """Any payload as the records of a batch with the CRC the crc32c package computes: both
    checks reach the records (and then agree); with a CRC one off, both say None."""
    builder = RecordBatchBuilder()
    builder.append(payload, None, (), NOW)
    data = bytearray(builder.build())
    assert _compiled().producer_batch(bytes(data), RecordBatchHeader) is not None
    good = struct.unpack_from(">I", data, 17)[0]
    assert good == crc32c.crc32c(bytes(data[21:]))
    struct.pack_into(">I", data, 17, good ^ 1)
    assert _compiled().producer_batch(bytes(data), RecordBatchHeader) is None
    assert REFERENCE.producer_batch(bytes(data), RecordBatchHeader) is None


def _outcome(log: Log, data: bytes) -> tuple[Any, ...]:
    try:
        info = log.append_records(data)
    except CorruptRecordError as err:  # damaged records: the two decoders word it each its way
        return ("corrupt", type(err).__name__)
    except KafkaLogError as err:  # everything else in the same words, per-record errors too
        return ("error", type(err).__name__, str(err), getattr(err, "record_errors", ()))
    return ("ok", info)


CONFIGS = [
    {},
    {"cleanup.policy": "compact"},
    {"message.timestamp.type": "LogAppendTime"},
    {"compression.type": "lz4"},
    {"max.message.bytes": "400"},
    {"message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "3600000"},
]


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Any]:
    opened: list[Log] = []

    def open_pair(props: dict[str, str]) -> tuple[Log, Log]:
        config = LogConfig.from_properties(props)
        n = len(opened)
        pair = (
            Log.open(tmp_path / f"ref{n}-0", config, ManualClock(NOW)),
            Log.open(tmp_path / f"fast{n}-0", config, ManualClock(NOW)),
        )
        opened.extend(pair)
        return pair

    try:
        yield open_pair
    finally:
        for log in opened:
            log.close()


def _segment_bytes(log: Log) -> bytes:
    return b"".join(seg.log.path.read_bytes() for seg in log.segments)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(props=st.sampled_from(CONFIGS), appends=st.lists(damaged(), min_size=1, max_size=8))
def test_a_log_on_either_codec_appends_alike(
    logs: Any, props: dict[str, str], appends: list[bytes]
) -> None:
    reference_log, fast_log = logs(props)
    before = codec_module._chosen[0]
    try:
        for data in appends:
            codec_module._chosen[0] = REFERENCE
            expected = _outcome(reference_log, data)
            codec_module._chosen[0] = _compiled()
            assert _outcome(fast_log, data) == expected
    finally:
        codec_module._chosen[0] = before
    reference_log.flush()
    fast_log.flush()
    assert _segment_bytes(fast_log) == _segment_bytes(reference_log)


def test_a_producer_batch_takes_the_one_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common append skips the full validation: the compiled check took it whole."""
    from kafkalog.log import write_path

    def no(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the full validation ran")

    monkeypatch.setattr(write_path, "analyze", no)
    before = codec_module._chosen[0]
    codec_module._chosen[0] = _compiled()
    log = Log.open(tmp_path / "t-0", LogConfig(), ManualClock(NOW))
    try:
        for compression in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
            builder = RecordBatchBuilder(compression=compression, producer_id=3, producer_epoch=0,
                                         base_sequence=log.log_end_offset)  # fmt: skip
            builder.append(b"v", b"k", (), NOW)
            builder.append(b"w", None, (), NOW + 1)
            info = log.append_records(builder.build())
            assert (info.first_offset, info.last_offset) == (
                log.log_end_offset - 2,
                log.log_end_offset - 1,
            )
        assert [r.value for r in log.read_records(0)] == [b"v", b"w"] * 3
        assert check_producer_batch(b"\x00" * 70, log.config, NOW) is None
    finally:
        codec_module._chosen[0] = before
        log.close()


def test_the_walk_releases_the_gil() -> None:
    """With a switch interval of minutes, another thread (which lets go of the GIL after each
    tick) runs during the checks only if the check lets go of it."""
    builder = RecordBatchBuilder()
    for i in range(60_000):
        builder.append(b"x" * 100, b"k%d" % i, (), NOW)
    data = builder.build()
    ticks = [0]
    stop = threading.Event()
    started = threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)  # hands the GIL back at once

    before = sys.getswitchinterval()
    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    started.wait()
    sys.setswitchinterval(300.0)
    try:
        seen = ticks[0]
        for _ in range(20):
            assert _compiled().producer_batch(data, RecordBatchHeader) is not None
        ran = ticks[0] - seen
    finally:
        sys.setswitchinterval(before)
        stop.set()
        thread.join()
    assert ran > 0


def test_per_record_errors_come_out_alike(logs: Any) -> None:
    """KIP-467's per-record errors (which records, and why) through either codec."""
    reference_log, fast_log = logs({"cleanup.policy": "compact"})
    builder = RecordBatchBuilder(compression=CompressionType.LZ4)
    for key in (b"a", None, b"c", None):
        builder.append(b"v", key, (), NOW)
    data = builder.build()
    before = codec_module._chosen[0]
    try:
        codec_module._chosen[0] = REFERENCE
        expected = _outcome(reference_log, data)
        codec_module._chosen[0] = _compiled()
        got = _outcome(fast_log, data)
    finally:
        codec_module._chosen[0] = before
    assert got == expected
    assert got[1] == "InvalidRecordError" and [i for i, _ in got[3]] == [1, 3]


def test_a_batch_over_max_message_bytes_is_never_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile client's oversized batch (a gzip bomb, say) is refused on its size before the
    check inflates or walks a byte of it, as Kafka refuses it (RecordTooLargeException)."""
    calls: list[int] = []
    compiled = _compiled()
    monkeypatch.setattr(compiled, "producer_batch", lambda *a: calls.append(1))
    before = codec_module._chosen[0]
    codec_module._chosen[0] = compiled
    log = Log.open(
        tmp_path / "t-0", LogConfig.from_properties({"max.message.bytes": "1000"}), ManualClock(NOW)
    )
    try:
        builder = RecordBatchBuilder(compression=CompressionType.GZIP)
        builder.append(random.Random(1).randbytes(5000), None, (), NOW)  # does not shrink
        data = builder.build()
        assert len(data) > 1000
        with pytest.raises(KafkaLogError, match=r"max\.message\.bytes"):
            log.append_records(data)
        assert calls == []
    finally:
        codec_module._chosen[0] = before
        log.close()
