"""Loading and crash recovery on real files: cases from Kafka's LogLoaderTest, and damaged files.

A "crash" is ``close_without_flush`` (no flush, no trim, no clean-shutdown marker) followed by
damage to the files and a reopen. After every kind of damage, the reopened log must hold every
batch before the damage, byte for byte, with indexes that find each offset.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog import ManualClock, MemoryRecords, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.storage import filenames as fn

NOW = 1_700_000_000_000
CONFIG = {"internal.segment.bytes": 1500, "index.interval.bytes": 150}


def open_log(path: Path, **extra: object) -> Log:
    return Log.open(path, LogConfig.from_properties(CONFIG | extra), ManualClock(NOW))


def fill(log: Log, n: int) -> list[bytes]:
    """Append n one-record batches; return each record's value."""
    values = []
    for i in range(n):
        value = b"value-%04d-" % i + b"z" * (i % 7)
        log.append([Record(value, key=b"k%d" % i, timestamp=NOW + i)])
        values.append(value)
    return values


def check_log(log: Log, values: list[bytes]) -> None:
    """Every offset reads back its value and every index lookup lands on its batch."""
    assert log.log_end_offset == len(values)
    got = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        recs = log.read_records(offset, 10**6)
        assert recs, f"nothing read at {offset}"
        got.extend(r.value for r in recs)
        offset = recs[-1].offset + 1
    assert got == values
    for seg in log.segments:
        nxt = seg.read_next_offset()
        for o in range(seg.base_offset, nxt):
            found = seg.translate_offset(o)
            assert found is not None and found.last_offset == o
        seg.offset_index.sanity_check()
        seg.time_index.sanity_check()


def crash(log: Log) -> Path:
    log.close_without_flush()
    return log.directory


def test_clean_reopen_keeps_everything_and_recovers_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 40)
    log.close()
    again = open_log(tmp_path / "t-0")
    assert again.load_result.recovered_segments == [] and again.recovery_point == 40
    check_log(again, values)


def test_unclean_reopen_recovers_from_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 40)
    rp = log.recovery_point
    d = crash(log)
    again = open_log(d)
    recovered = again.load_result.recovered_segments
    assert recovered and min(recovered) == again.segments.floor_segment(rp).base_offset  # type: ignore[union-attr]
    assert again.recovery_point == rp  # unchanged until the next flush
    check_log(again, values)


@pytest.fixture
def crashed(tmp_path: Path) -> tuple[Path, list[bytes], list[int]]:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 30)
    sizes = [b.size_in_bytes for b in log.active_segment.batches()]
    return crash(log), values, sizes


def active_log_file(d: Path) -> Path:
    return sorted(d.glob("*.log"))[-1]


def test_cut_the_active_segment_at_every_byte_of_its_last_batch(
    crashed: tuple[Path, list[bytes], list[int]],
) -> None:
    d, values, sizes = crashed
    path = active_log_file(d)
    original = path.read_bytes()
    last = sizes[-1]
    for cut in range(len(original) - last, len(original)):
        path.write_bytes(original[:cut])
        for f in d.glob(".kafka_cleanshutdown"):
            f.unlink()
        log = open_log(d)
        check_log(log, values[:-1])
        assert path.stat().st_size == len(original) - last
        log.close_without_flush()
        path.write_bytes(original)


@pytest.mark.parametrize("garbage", [b"\x00" * 50, os.urandom(300), b"\xff" * 17])
def test_garbage_appended_to_log_and_index(
    crashed: tuple[Path, list[bytes], list[int]], garbage: bytes
) -> None:
    d, values, _ = crashed
    with open(active_log_file(d), "ab") as f:
        f.write(garbage)
    with open(sorted(d.glob("*.index"))[-1], "ab") as f:
        f.write(b"\x13" * 16)
    log = open_log(d)
    check_log(log, values)
    assert log.load_result.truncated_bytes == len(garbage)


def test_bit_flip_truncates_at_the_damaged_batch(
    crashed: tuple[Path, list[bytes], list[int]],
) -> None:
    d, values, sizes = crashed
    path = active_log_file(d)
    data = bytearray(path.read_bytes())
    damaged = len(sizes) // 2
    pos = sum(sizes[:damaged]) + 40
    data[pos] ^= 0x04
    path.write_bytes(bytes(data))
    log = open_log(d)
    kept = len(values) - (len(sizes) - damaged)
    check_log(log, values[:kept])
    assert any("truncated" in a for a in log.load_result.actions)


def test_damage_in_an_earlier_segment_drops_all_later_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 60)
    assert log.number_of_segments >= 3
    first = log.segments.first_segment()
    assert first is not None
    end_of_first = first.read_next_offset()
    d = crash(log)
    (d / fn.RECOVERY_POINT_CHECKPOINT).write_text("0\n1\nt 0 0\n")  # recover from the start
    path = sorted(d.glob("*.log"))[0]
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # the last batch of the first segment
    path.write_bytes(bytes(data))
    again = open_log(d)
    check_log(again, values[: end_of_first - 1])
    assert again.number_of_segments == 1
    assert not list(d.glob("*.deleted"))


@pytest.mark.parametrize("which", [".index", ".timeindex", "both"])
def test_deleted_index_files_are_rebuilt(tmp_path: Path, which: str) -> None:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 40)
    log.close()  # clean: a missing .index still forces a rebuild
    d = tmp_path / "t-0"
    for suffix in [".index", ".timeindex"] if which == "both" else [which]:
        for f in d.glob("*" + suffix):
            f.unlink()
    again = open_log(d)
    check_log(again, values)
    for seg in again.segments:
        assert seg.offset_index_file.exists()


def test_garbled_index_files_are_rebuilt_after_a_crash(
    crashed: tuple[Path, list[bytes], list[int]],
) -> None:
    d, values, _ = crashed
    for f in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
        f.write_bytes(b"\x01\x02")
    (d / fn.RECOVERY_POINT_CHECKPOINT).write_text("0\n1\nt 0 0\n")
    log = open_log(d)
    check_log(log, values)


def test_leftover_swap_cleaned_deleted_and_orphan_files(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 40)
    log.close()
    d = tmp_path / "t-0"
    first = sorted(d.glob("*.log"))[0]
    (d / (first.name + ".deleted")).write_bytes(b"old")
    (d / "00000000000000000003.log.cleaned").write_bytes(b"half-cleaned")
    (d / "00000000000000000005.log.swap").write_bytes(b"unfinished swap")  # >= min cleaned
    (d / "00000000000000099999.index").write_bytes(b"\x00" * 8)  # orphan
    (d / "00000000000000099999.timeindex").write_bytes(b"\x00" * 12)
    again = open_log(d)
    check_log(again, values)
    leftovers = [p.name for p in d.iterdir() if p.name.endswith((".deleted", ".cleaned", ".swap"))]
    assert leftovers == []
    assert not (d / "00000000000000099999.index").exists()


def test_completed_swap_replaces_the_old_segments(tmp_path: Path) -> None:
    """A crash after step 1 of the swap (.cleaned renamed to .swap) is completed by the loader."""
    log = open_log(tmp_path / "t-0")
    fill(log, 40)
    log.close()
    d = tmp_path / "t-0"
    first = sorted(d.glob("*.log"))[0]
    with Log.open(d, LogConfig.from_properties(CONFIG), ManualClock(NOW)) as probe:
        end = probe.segments.first_segment().read_next_offset()  # type: ignore[union-attr]
    # a "cleaned" replacement of the first segment that keeps only its last record
    replacement = MemoryRecords.build(
        [Record(b"survivor", key=b"k", timestamp=NOW)], base_offset=end - 1
    )
    (d / (first.name + ".swap")).write_bytes(bytes(replacement))
    (d / (first.name + ".swap")).rename(d / "00000000000000000000.log.swap")
    again = open_log(d)
    assert [r.value for r in again.read_records(0)][:1] == [b"survivor"]
    assert not list(d.glob("*.swap"))


def test_all_segments_deleted_starts_at_the_log_start_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 10)
    log.maybe_increment_log_start_offset(7)
    log.close()
    d = tmp_path / "t-0"
    for f in d.glob("0*"):
        f.unlink()
    again = open_log(d)
    assert (again.log_start_offset, again.log_end_offset) == (7, 7)
    assert again.segments.base_offsets == (7,)


def test_empty_active_segment_without_index_loads(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    values = fill(log, 5)
    log.roll()
    d = crash(log)
    active = sorted(d.glob("*.log"))[-1]
    for suffix in (".index", ".timeindex"):
        p = active.with_suffix(suffix)
        if p.exists():
            p.unlink()
    again = open_log(d)
    check_log(again, values)
    again.append([Record(b"next", key=b"k")])
    assert again.active_segment.offset_index_file.exists()


def test_preallocated_segments_survive_a_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", preallocate="true")
    values = fill(log, 8)
    path = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    assert path.stat().st_size == 1500  # preallocated
    d = crash(log)
    again = open_log(d, preallocate="true")
    check_log(again, values)
    again.close()
    assert sorted(d.glob("*.log"))[-1].stat().st_size < 1500


def test_a_broker_directory_opens_from_its_parent_checkpoints(tmp_path: Path) -> None:
    log = open_log(tmp_path / "logs" / "t-0")
    values = fill(log, 20)
    log.close()
    d = tmp_path / "logs" / "t-0"
    # make it look like a broker's: state in the log directory, none in the partition directory
    for name in (
        fn.CLEAN_SHUTDOWN_FILE,
        fn.RECOVERY_POINT_CHECKPOINT,
        fn.LOG_START_OFFSET_CHECKPOINT,
    ):
        (d / name).rename(tmp_path / "logs" / name)
    again = open_log(d)
    assert again.load_result.recovered_segments == []  # the broker's clean marker is honoured
    check_log(again, values)


# --- KAFKA-6264: a legacy segment whose offsets overflow its base is split -----------------------


def test_an_overflowed_legacy_segment_is_split_on_recovery(tmp_path: Path) -> None:
    from kafkalog.records.legacy import build_legacy
    from kafkalog.storage import filenames as fn
    from kafkalog.types import INT32_MAX, CompressionType

    part = tmp_path / "old-0"
    part.mkdir()
    high = INT32_MAX + 10
    recs = [Record(b"v%d" % i, b"k%d" % i, timestamp=1_700_000_000_000) for i in range(4)]
    data = build_legacy(
        recs, magic=1, compression_type=CompressionType.NONE, offsets=[0, 1, high, high + 1]
    )
    data += build_legacy(
        recs[:2], magic=1, compression_type=CompressionType.GZIP, offsets=[high + 5, high + 9]
    )
    fn.log_file(part, 0).write_bytes(data)  # no index: recovery rebuilds it and meets the overflow
    log = Log.open(part, LogConfig(), ManualClock())
    assert log.segments.base_offsets == (0, high)
    assert log.log_end_offset == high + 10
    got = [r.offset for s in log.segments for b in s.batches() for r in b.records()]
    assert got == [0, 1, high, high + 1, high + 5, high + 9]
    assert sum(s.size for s in log.segments) == len(data)
    assert any("splitting" in a for a in log.load_result.actions)
    assert not list(part.glob("*.swap")) and not list(part.glob("*.cleaned"))
    assert log.read_records(high + 1)[0].value == b"v3"
    log.close()
    reopened = Log.open(part, LogConfig(), ManualClock())
    assert reopened.segments.base_offsets == (0, high)
    reopened.close()
