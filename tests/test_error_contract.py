"""The error contract: every public entry point, given an argument of the wrong type or out of
range, raises a KafkaLogError subclass (or does what it documents), never a builtin error from
deep inside, and leaves the log usable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kafkalog
from kafkalog import (
    BatchScanner,
    KafkaLogError,
    Log,
    LogConfig,
    LogManager,
    MemoryRecords,
    ProducerFields,
    Record,
)
from kafkalog.log.view import PartitionView

BAD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.sampled_from([-1, -(2**31) - 1, 2**31, 2**32, 2**63, -(2**63) - 1, 2**70, -(2**70)]),
    st.integers(),
)

# (name, call taking the fixture's objects and one bad value)
ENTRY_POINTS: list[tuple[str, Callable[[Any, Any, Any], object]]] = [
    ("Log.read start", lambda log, m, v: log.read(v, 100)),
    ("Log.read max_bytes", lambda log, m, v: log.read(0, v)),
    ("Log.read max_offset", lambda log, m, v: log.read(0, 100, max_offset=v)),
    ("Log.read isolation", lambda log, m, v: log.read(0, 100, isolation=v)),
    ("Log.read_records", lambda log, m, v: log.read_records(v)),
    ("Log.list_offsets", lambda log, m, v: log.list_offsets(v)),
    ("Log.offset_for_timestamp", lambda log, m, v: log.offset_for_timestamp(v)),
    ("Log.roll", lambda log, m, v: log.roll(v)),
    ("Log.truncate_to", lambda log, m, v: log.truncate_to(v)),
    ("Log.update_high_watermark", lambda log, m, v: log.update_high_watermark(v)),
    ("Log.maybe_increment_log_start_offset",
     lambda log, m, v: log.maybe_increment_log_start_offset(v)),
    ("Log.flush", lambda log, m, v: log.flush(v)),
    ("Log.append records", lambda log, m, v: log.append(v)),
    ("Log.append a record", lambda log, m, v: log.append([v])),
    ("Log.append leader_epoch", lambda log, m, v: log.append([Record(b"x")], leader_epoch=v)),
    ("Log.append producer", lambda log, m, v: log.append([Record(b"x")], producer=v)),
    ("Log.append producer id",
     lambda log, m, v: log.append([Record(b"x")], producer=ProducerFields(v, 0, 0))),
    ("Log.append producer epoch",
     lambda log, m, v: log.append([Record(b"x")], producer=ProducerFields(5, v, 0))),
    ("Log.append sequence",
     lambda log, m, v: log.append([Record(b"x")], producer=ProducerFields(5, 0, v))),
    ("Log.append_end_txn_marker pid", lambda log, m, v: log.append_end_txn_marker(v, 0, "abort")),
    ("Log.append_end_txn_marker epoch",
     lambda log, m, v: log.append_end_txn_marker(7, v, "abort")),
    ("Log.append_end_txn_marker kind", lambda log, m, v: log.append_end_txn_marker(7, 0, v)),
    ("Log.append_end_txn_marker coordinator epoch",
     lambda log, m, v: log.append_end_txn_marker(7, 0, "abort", coordinator_epoch=v)),
    ("Log.append_as_follower", lambda log, m, v: log.append_as_follower(v)),
    ("Record value", lambda log, m, v: Record(v)),
    ("Record key", lambda log, m, v: Record(b"x", key=v)),
    ("Record timestamp", lambda log, m, v: Record(b"x", timestamp=v)),
    ("Record headers", lambda log, m, v: Record(b"x", headers=v)),
    ("MemoryRecords.build base_offset",
     lambda log, m, v: MemoryRecords.build([Record(b"x")], base_offset=v)),
    ("MemoryRecords.build compression",
     lambda log, m, v: MemoryRecords.build([Record(b"x")], compression=v)),
    ("MemoryRecords", lambda log, m, v: list(MemoryRecords(v).batches())),
    ("BatchScanner start", lambda log, m, v: list(BatchScanner(b"\x00" * 70, start=v))),
    ("BatchScanner buffer", lambda log, m, v: list(BatchScanner(v))),
    ("LogConfig.from_properties",
     lambda log, m, v: LogConfig.from_properties({"segment.bytes": v})),
    ("LogConfig.from_properties retention",
     lambda log, m, v: LogConfig.from_properties({"retention.ms": v})),
    ("LogManager.create_topic name", lambda log, m, v: m.create_topic(v, 1)),
    ("LogManager.create_topic partitions", lambda log, m, v: m.create_topic("fresh", v)),
    ("LogManager.create_topic config",
     lambda log, m, v: m.create_topic("fresh2", 1, {"cleanup.policy": v})),
    ("LogManager.get_log", lambda log, m, v: m.get_log("t", v)),
    ("LogManager.truncate_to", lambda log, m, v: m.truncate_to("t", 0, v)),
    ("LogManager.delete_topic", lambda log, m, v: m.delete_topic(v)),
    ("PartitionView", lambda log, m, v: PartitionView(v)),
    ("PartitionView.batches",
     lambda log, m, v: list(PartitionView(m.log_dir_of("t") / "t-0").batches(v))),
    ("PartitionView.offset_for_timestamp",
     lambda log, m, v: PartitionView(m.log_dir_of("t") / "t-0").offset_for_timestamp(v)),
]  # fmt: skip


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("contract")
    manager = LogManager(root / "logs")
    log = manager.create_topic("t", 1)[0]
    log.append([Record(b"v%d" % i, key=b"k") for i in range(5)])
    standalone = Log.open(root / "alone-0")
    standalone.append([Record(b"x")])
    yield standalone, manager
    standalone.close()
    manager.close()


@pytest.mark.parametrize("name,call", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
@settings(max_examples=40)
@given(value=BAD_VALUES)
def test_bad_arguments_raise_only_kafkalog_errors(
    fixture: Any, name: str, call: Callable[[Any, Any, Any], object], value: object
) -> None:
    log, manager = fixture
    with contextlib.suppress(KafkaLogError):
        call(log, manager, value)
    # the log is still usable whatever happened
    end = log.log_end_offset
    log.append([Record(b"still-works")])
    assert log.log_end_offset == end + 1


def test_every_error_and_return_type_is_exported() -> None:
    import inspect

    from kafkalog import errors

    for name, obj in vars(errors).items():
        if inspect.isclass(obj) and issubclass(obj, KafkaLogError):
            assert name in kafkalog.__all__, name
    for name in ("LogAppendInfo", "FetchDataInfo", "TimestampAndOffset"):
        assert name in kafkalog.__all__


def test_a_closed_log_says_so(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.close()
    for call in (
        lambda: log.append([Record(b"x")]),
        log.roll,
        lambda: log.truncate_to(0),
        log.flush,
    ):
        with pytest.raises(kafkalog.LogClosedError):
            call()
