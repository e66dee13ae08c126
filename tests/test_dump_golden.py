"""Golden output of ``kafkalog dump-log``: the spec's vectors, real broker bytes, compressed,
transactional and control batches, and the index, time index, txn index and snapshot of one
partition. The inputs are frozen as hex (so codec library versions cannot move them) and the
expected stdout/stderr were checked line by line against Kafka's DumpLogSegments output formats.

Regenerate after a deliberate format change with ``KAFKALOG_REGEN_GOLDEN=1 pytest
tests/test_dump_golden.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import golden_bytes
from kafkalog import Log, LogConfig, ManualClock, MemoryRecords, ProducerFields, Record
from kafkalog.cli.main import cli
from test_vectors import VECTOR_A, VECTOR_B, VECTOR_C, VECTOR_D, VECTOR_E

DUMP = Path(__file__).parent / "golden" / "dump"
REGEN = os.environ.get("KAFKALOG_REGEN_GOLDEN") == "1"
NOW = 1_700_000_000_000
SEGMENT = "00000000000000000000"


def _compressed() -> bytes:
    """One v2 batch per codec, then a gzip v1 wrapper (the frozen hex, once built)."""
    parts = []
    offset = 0
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        records = [Record(f"{codec}-{i}".encode(), f"k{i}".encode(), timestamp=NOW + i)
                   for i in range(3)]  # fmt: skip
        parts.append(bytes(MemoryRecords.build(records, compression=codec, base_offset=offset)))
        offset += 3
    legacy = [Record(b"old", b"k", timestamp=NOW), Record(b"older", None, timestamp=NOW + 1)]
    parts.append(
        bytes(MemoryRecords.build(legacy, magic=1, compression="gzip", base_offset=offset))
    )
    return b"".join(parts)


def _transactional(directory: Path) -> None:
    """A partition with plain, committed and aborted data and small index intervals."""
    config = LogConfig.from_properties({"index.interval.bytes": "1"})
    with Log.open(directory, config, ManualClock(NOW)) as log:
        log.append([Record(b"plain", b"a", [("src", b"web")], timestamp=NOW)])
        txn = ProducerFields(1000, 0, 0, is_transactional=True)
        log.append([Record(b"t1", b"b", timestamp=NOW + 1), Record(b"t2", None, timestamp=NOW + 2)],
                   producer=txn)  # fmt: skip
        log.append_end_txn_marker(1000, 0, "commit", 5)
        aborted = ProducerFields(2000, 3, 0, is_transactional=True)
        log.append([Record(b"gone", b"c", timestamp=NOW + 3)], producer=aborted)
        log.append([Record(b"after", b"d", timestamp=NOW + 4)])
        log.append_end_txn_marker(2000, 3, "abort", 5)


CASES = {
    # name: (files in the case, extra dump-log options)
    "spec-vectors": ([f"{SEGMENT}.log"], ["--print-data-log"]),
    "spec-legacy": ([f"{SEGMENT}.log"], ["--deep-iteration"]),
    "broker-v2": ([f"{SEGMENT}.log"], ["--print-data-log"]),
    "broker-v1": ([f"{SEGMENT}.log"], ["--print-data-log"]),
    "broker-v0": ([f"{SEGMENT}.log"], []),
    "compressed": ([f"{SEGMENT}.log"], ["--print-data-log"]),
    "transactional": (
        [f"{SEGMENT}.{s}" for s in ("log", "index", "timeindex", "txnindex")]
        + ["00000000000000000007.snapshot"],
        ["--deep-iteration"],
    ),
    "partial-tail": ([f"{SEGMENT}.log"], ["--skip-record-metadata", "--print-data-log"]),
}


def _build_inputs(name: str, directory: Path) -> None:
    log = directory / f"{SEGMENT}.log"
    if name == "spec-vectors":
        log.write_bytes(VECTOR_A + VECTOR_E + VECTOR_B)
    elif name == "spec-legacy":
        log.write_bytes(VECTOR_C + VECTOR_D)
    elif name.startswith("broker-"):
        log.write_bytes(golden_bytes(f"{name}.hex"))
    elif name == "compressed":
        log.write_bytes(_compressed())
    elif name == "transactional":
        _transactional(directory)
    elif name == "partial-tail":
        log.write_bytes(VECTOR_A + VECTOR_B[:40])


def _materialize(name: str, directory: Path) -> None:
    files, _ = CASES[name]
    if REGEN:
        _build_inputs(name, directory)
        for f in files:
            (DUMP / f"{name}.{f}.hex").write_text((directory / f).read_bytes().hex() + "\n")
        return
    for f in files:
        (directory / f).write_bytes(bytes.fromhex((DUMP / f"{name}.{f}.hex").read_text()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_dump_log_matches_golden_output(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    _materialize(name, directory)
    monkeypatch.chdir(tmp_path)
    files, options = CASES[name]
    # these goldens predate the oracle and keep Kafka 3.9's report conventions; the 4.x output
    # is checked against Kafka itself in test_kafka_oracle_dump.py
    args = ["dump-log", "--kafka-version", "3.9", "--files", ",".join(f"t-0/{f}" for f in files)]
    result = CliRunner().invoke(cli, [*args, *options])
    assert result.exit_code == 0, result.output
    got = result.stdout + "--- stderr ---\n" + result.stderr.replace(str(tmp_path), "{tmp}")
    expected = DUMP / f"{name}.out"
    if REGEN:
        expected.write_text(got)
    assert got == expected.read_text()


# Bytes as Java 17's new String(bytes, UTF_8) prints them (code points), which DumpLogSegments
# uses for keys and payloads: a surrogate's three-byte form is one U+FFFD, not one per byte.
JAVA_UTF8 = [
    ("eda0a0", [0xFFFD]),
    ("edbf9f", [0xFFFD]),
    ("c1eda0", [0xFFFD, 0xFFFD]),
    ("80eda041ee90", [0xFFFD, 0xFFFD, 0x41, 0xFFFD]),
    ("edbf6d01f4", [0xFFFD, 0x6D, 0x01, 0xFFFD]),
    ("eda0f1f341", [0xFFFD, 0xFFFD, 0xFFFD, 0x41]),
    ("f09080", [0xFFFD]),
    ("e0804141", [0xFFFD, 0xFFFD, 0x41, 0x41]),
    ("ed9fbf", [0xD7FF]),
    ("c3a9f09f9880", [0xE9, 0x1F600]),
]


@pytest.mark.parametrize(("hex_bytes", "code_points"), JAVA_UTF8)
def test_keys_and_payloads_print_malformed_utf8_as_java_does(
    hex_bytes: str, code_points: list[int]
) -> None:
    from kafkalog.cli.dump_decoders import java_utf8

    assert [ord(c) for c in java_utf8(bytes.fromhex(hex_bytes))] == code_points
