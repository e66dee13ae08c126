"""The Spark source's options and planning, without a JVM: Spark's option names and rules,
offset JSON, resolution of earliest/latest/-2/-1/timestamps, data loss, and range splitting on
batch boundaries from the offset index."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import itertools

from kafkalog import LogConfig, LogManager, ManualClock, ProducerFields, Record
from kafkalog.errors import InvalidConfigError
from kafkalog.spark.options import parse_read_options, parse_write_options
from kafkalog.spark.planning import DataLossError, OffsetRange, plan_batch
from kafkalog.spark.source import from_json_offsets, rate_limit, to_json_offsets
from kafkalog.types import TopicPartition

NOW = 1_700_000_000_000


@pytest.fixture
def data(tmp_path: Path) -> Path:
    config = LogConfig.from_properties(
        {"internal.segment.bytes": "2000", "index.interval.bytes": "1"}
    )
    with LogManager([tmp_path], config, ManualClock(NOW)) as m:
        m.create_topic("a", 2)
        m.create_topic("b", 1)
        for p in range(2):
            for i in range(100):
                m.get_log("a", p).append([Record(b"v", b"k%d" % i, timestamp=NOW + i)])
        m.get_log("b", 0).append([Record(b"x", timestamp=NOW)])
        m.get_log("b", 0).append(
            [Record(b"t", timestamp=NOW)], producer=ProducerFields(3, 0, 0, True)
        )
        m.get_log("b", 0).append([Record(b"y", timestamp=NOW)])
    return tmp_path


def opts(path: Path, streaming: bool = False, **kw: str) -> object:
    return parse_read_options({"path": str(path), **kw}, streaming=streaming)


def test_option_rules_name_the_option(data: Path) -> None:
    cases = {
        "subscribe": {},
        "startingOffsets": {"subscribe": "a", "startingOffsets": "latest"},
        "endingOffsets": {"subscribe": "a", "endingOffsets": "earliest"},
        "nosuch": {"subscribe": "a", "noSuch": "1"},
        "kafka.auto.offset.reset": {"subscribe": "a", "kafka.auto.offset.reset": "x"},
        "minPartitions": {"subscribe": "a", "minPartitions": "0"},
        "kafka.isolation.level": {"subscribe": "a", "kafka.isolation.level": "x"},
        "failOnDataLoss": {"subscribe": "a", "failOnDataLoss": "maybe"},
    }
    for key, options in cases.items():
        with pytest.raises(InvalidConfigError) as err:
            parse_read_options({"path": str(data), **options}, streaming=False)
        assert err.value.key.lower() == key.lower(), (key, err.value)
    with pytest.raises(InvalidConfigError, match="exactly one"):
        opts(data, subscribe="a", assign='{"a":[0]}')
    with pytest.raises(InvalidConfigError, match="streaming"):
        opts(data, streaming=True, subscribe="a", endingOffsets="latest")
    with pytest.raises(InvalidConfigError, match="path"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    assert parse_write_options({"PATH": str(data), "topic": "a"}).topic == "a"


def test_resolution_of_offsets_json_and_timestamps(data: Path) -> None:
    ranges = plan_batch(opts(data, subscribe="a"))
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 100), (1, 0, 100)]
    ranges = plan_batch(
        opts(
            data,
            subscribe="a",
            startingOffsets='{"a":{"0":-2,"1":10}}',
            endingOffsets='{"a":{"0":50,"1":-1}}',
        )
    )
    assert [(r.start, r.end) for r in ranges] == [(0, 50), (10, 100)]
    with pytest.raises(InvalidConfigError, match="every assigned partition"):
        plan_batch(opts(data, subscribe="a", startingOffsets='{"a":{"0":1}}'))
    ranges = plan_batch(opts(data, subscribePattern="a", startingTimestamp=str(NOW + 42)))
    assert [(r.topic, r.start) for r in ranges] == [("a", 42), ("a", 42)]
    with pytest.raises(InvalidConfigError, match="no offset"):
        plan_batch(opts(data, subscribe="a", startingTimestamp=str(NOW + 999)))
    ranges = plan_batch(
        opts(
            data,
            subscribe="a",
            startingTimestamp=str(NOW + 999),
            startingOffsetsByTimestampStrategy="latest",
        )
    )
    assert ranges == []  # every partition starts at its end
    committed = plan_batch(
        opts(data, assign='{"b":[0]}', **{"kafka.isolation.level": "read_committed"})
    )
    assert [(r.start, r.end) for r in committed] == [(0, 1)]  # stops at the LSO


def test_data_loss_below_log_start(data: Path) -> None:
    with LogManager([data], clock=ManualClock(NOW)) as m:
        log = m.get_log("a", 0)
        log.maybe_increment_log_start_offset(30)
        log.roll()
        log.delete_old_segments()
    start = '{"a":{"0":0,"1":0}}'
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        plan_batch(opts(data, subscribe="a", startingOffsets=start))
    with pytest.warns(UserWarning, match="may have been lost"):
        ranges = plan_batch(
            opts(data, subscribe="a", startingOffsets=start, failOnDataLoss="false")
        )
    assert ranges[0].start >= 20


def test_splits_land_on_batch_boundaries_and_cover_the_range(data: Path) -> None:
    for options in ({"minPartitions": "7"}, {"maxRecordsPerPartition": "30"}):
        ranges = plan_batch(opts(data, subscribe="a", **options))
        for p in range(2):
            mine = [r for r in ranges if r.partition == p]
            assert mine[0].start == 0 and mine[-1].end == 100
            assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        if "maxRecordsPerPartition" in options:
            assert all(r.size <= 30 for r in ranges) and len(ranges) == 8
        else:
            assert 6 <= len(ranges) <= 8


def test_offset_json_is_sparks_and_rate_limit_is_proportional() -> None:
    offsets = {TopicPartition("b", 10): 5, TopicPartition("a", 2): 1, TopicPartition("a", 10): 3}
    as_json = to_json_offsets(offsets)
    assert list(as_json) == ["a", "b"] and list(as_json["a"]) == ["2", "10"]
    assert from_json_offsets('{"a":{"2":1,"10":3},"b":{"10":5}}') == offsets
    start = {TopicPartition("t", 0): 0, TopicPartition("t", 1): 0}
    latest = {TopicPartition("t", 0): 900, TopicPartition("t", 1): 100}
    assert rate_limit(start, latest, 100) == {
        TopicPartition("t", 0): 90,
        TopicPartition("t", 1): 10,
    }
    assert rate_limit(start, latest, 5000) == latest
    assert OffsetRange("t", 0, "/x", 5, 9, False, False, True).size == 4


def test_min_offsets_per_trigger_waits_for_rows_or_max_trigger_delay(data: Path) -> None:
    """Spark's Kafka source: a batch waits until minOffsetsPerTrigger new offsets are there,
    or maxTriggerDelay has passed since the last batch; maxOffsetsPerTrigger still caps it."""
    from kafkalog.spark.source import KafkaLogStreamReader

    now = [1_000_000]
    read = opts(data, True, subscribe="a", minOffsetsPerTrigger="150",
                maxOffsetsPerTrigger="160", maxTriggerDelay="30s")  # fmt: skip
    reader = KafkaLogStreamReader(read, clock=lambda: now[0])  # type: ignore[arg-type]
    start = {"a": {"0": 0, "1": 0}}
    limit = reader.getDefaultReadLimit()  # what Spark 4.2+ hands back: maxOffsetsPerTrigger
    assert reader.latestOffset(start, limit) == {"a": {"0": 80, "1": 80}}  # the first: capped
    held = {"a": {"0": 80, "1": 80}}  # 40 new offsets < 150: held back
    assert reader.latestOffset(held, limit) == held
    now[0] += 29_999
    assert reader.latestOffset(held, None) == held  # Spark 4.0/4.1's call, the same rule
    now[0] += 1  # maxTriggerDelay since the last batch: whatever is there
    assert reader.latestOffset(held, limit) == {"a": {"0": 100, "1": 100}}
    assert reader.reportLatestOffset() == {"a": {"0": 100, "1": 100}}
    reader.prepareForTriggerAvailableNow()  # AvailableNow must finish: no holding back
    assert reader.latestOffset(held, None) == {"a": {"0": 100, "1": 100}}


def test_trigger_options_as_spark_checks_them(data: Path) -> None:
    read = opts(data, True, subscribe="a", maxTriggerDelay="2m")
    assert read.max_trigger_delay_ms == 120_000  # type: ignore[attr-defined]
    assert opts(data, True, subscribe="a").max_trigger_delay_ms == 900_000  # type: ignore[attr-defined]
    for bad, key in (({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
                     ({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger"),
                     ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
                      "minOffsetsPerTrigger")):  # fmt: skip
        with pytest.raises(InvalidConfigError) as err:
            opts(data, True, subscribe="a", **bad)
        assert key in str(err.value)


def test_a_start_past_the_end_is_blamed_on_starting_offsets(data: Path) -> None:
    read = opts(data, subscribe="b", startingOffsets='{"b":{"0":50}}')
    with pytest.raises(InvalidConfigError) as err:
        plan_batch(read)  # type: ignore[arg-type]
    assert "startingOffsets" in str(err.value) and "after its latest offset" in str(err.value)
    read = opts(data, subscribe="a", startingOffsets='{"a":{"0":50,"1":50}}',
                endingOffsets='{"a":{"0":40,"1":60}}')  # fmt: skip
    with pytest.raises(InvalidConfigError) as err:
        plan_batch(read)  # type: ignore[arg-type]
    assert "endingOffsets" in str(err.value)


def test_a_plan_lists_each_partition_directory_once(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolution of both ends, the start check, the upper bound and the split all ask the
    plan's frozen views; listing a directory again could also answer from a later moment."""
    import collections
    import os

    from kafkalog.log import view as view_module

    listed: collections.Counter[str] = collections.Counter()
    real_scandir, real_listdir = os.scandir, os.listdir

    def counting_scandir(path: object) -> object:
        listed[Path(str(path)).name] += 1
        return real_scandir(path)  # type: ignore[arg-type]

    def counting_listdir(path: object) -> object:
        listed[Path(str(path)).name] += 1
        return real_listdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(view_module.os, "scandir", counting_scandir)
    monkeypatch.setattr(view_module.os, "listdir", counting_listdir)
    ranges = plan_batch(
        opts(
            data,
            subscribe="a,b",
            minPartitions="9",
            startingOffsets="earliest",
            endingOffsets="latest",
            **{"kafka.isolation.level": "read_committed"},
        )
    )
    assert len(ranges) >= 9
    partitions = {name: n for name, n in listed.items() if name in ("a-0", "a-1", "b-0")}
    assert partitions == {"a-0": 1, "a-1": 1, "b-0": 1}
