"""The ``kafkalog`` command: dump-log's Kafka-format lines, verify, topics, produce/consume,
compact/retention, and the error paths (one line, a distinct exit code, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from kafka.partitioner.default import murmur2 as kp_murmur2

from kafkalog import Log, LogConfig, ManualClock, ProducerFields, Record
from kafkalog.cli.errors import EXIT_NOT_FOUND
from kafkalog.cli.main import LAZY_COMMANDS, cli
from kafkalog.records.partitioner import murmur2, partition_for_key
from kafkalog.storage import filenames as fn

NOW = 1_700_000_000_000


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def small_log(tmp_path: Path) -> Path:
    clock = ManualClock(NOW)
    path = tmp_path / "t-0"
    with Log.open(path, LogConfig(), clock) as log:
        log.append([Record(b"v0", b"k0", [("h", b"x")], timestamp=NOW)])
        log.append([Record(b"v1", None, timestamp=NOW + 1)], compression="gzip")
        log.append(
            [Record(b"t", b"k", timestamp=NOW + 2)],
            producer=ProducerFields(7, 1, 0, is_transactional=True),
        )
        log.append_end_txn_marker(7, 1, "commit", 3)
    return path


def test_dump_log_prints_kafkas_lines(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    segment = str(fn.log_file(path, 0))
    code, out, _ = run("dump-log", "--files", segment, "--deep-iteration")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Dumping {segment}"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        f"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {NOW} size: "
    )
    assert " magic: 2 compresscodec: none crc: " in lines[2] and lines[2].endswith("isvalid: true")
    assert lines[3] == (
        f"| offset: 0 CreateTime: {NOW} keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h]"
    )
    assert " compresscodec: gzip " in lines[4]
    assert (
        lines[5]
        == f"| offset: 1 CreateTime: {NOW + 1} keySize: -1 valueSize: 2 sequence: -1 headerKeys: []"
    )
    assert "producerId: 7 producerEpoch: 1" in lines[6] and "isTransactional: true" in lines[6]
    assert lines[7].endswith("sequence: 0 headerKeys: []")
    assert "isControl: true" in lines[8]
    assert lines[9].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 3")
    positions = [
        int(line.split(" position: ")[1].split()[0]) for line in lines if " position: " in line
    ]
    sizes = [int(line.split(" size: ")[1].split()[0]) for line in lines if " size: " in line]
    assert positions == [sum(sizes[:i]) for i in range(len(sizes))]


def test_dump_log_data_and_skip_metadata(tmp_path: Path) -> None:
    segment = str(fn.log_file(small_log(tmp_path), 0))
    _, out, _ = run("dump-log", "--files", segment, "--print-data-log")
    assert out.splitlines()[3].endswith("headerKeys: [h] key: k0 payload: v0")
    _, out, _ = run("dump-log", "--files", segment, "--print-data-log", "--skip-record-metadata")
    assert out.splitlines()[3] == "| key: k0 payload: v0"
    assert out.splitlines()[5] == "| payload: v1"  # Kafka 4.x indents whichever comes first
    args = ("--print-data-log", "--skip-record-metadata", "--kafka-version", "3.9")
    _, out, _ = run("dump-log", "--files", segment, *args)
    assert out.splitlines()[5] == " payload: v1"  # 3.9 indented only a key


def test_dump_log_reports_invalid_tail_and_non_consecutive_offsets(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    segment = fn.log_file(path, 0)
    with open(segment, "ab") as f:
        f.write(b"\x00" * 7)
    _, out, err = run("dump-log", "--files", str(segment), "--deep-iteration")
    assert out.splitlines()[-1] == f"Found 7 invalid bytes at the end of {segment.name}"
    assert err == ""
    clock = ManualClock(NOW)
    gap = tmp_path / "g-0"
    with Log.open(gap, LogConfig(), clock) as log:
        log.append_as_follower(
            Record_batch(0) + Record_batch(5)  # offsets 0 then 5: a gap, as after compaction
        )
    _, _, err = run("dump-log", "--files", str(fn.log_file(gap, 0)), "--deep-iteration")
    assert err.splitlines() == [
        f"Non-consecutive offsets in {fn.log_file(gap, 0).resolve()}",
        "  0 is followed by 5",
    ]


def Record_batch(offset: int) -> bytes:
    from kafkalog.records.builder import RecordBatchBuilder

    b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=0)
    b.append(b"v", key=b"k", timestamp=NOW)
    return b.build()


def test_dump_log_indexes_txnindex_and_snapshot(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    path = tmp_path / "t-0"
    config = LogConfig.from_properties({"index.interval.bytes": "1"})
    with Log.open(path, config, clock) as log:
        for i in range(3):
            log.append([Record(b"v", b"k", timestamp=NOW + i)])
        log.append([Record(b"a", b"k", timestamp=NOW)], producer=ProducerFields(9, 0, 0, True))
        log.append_end_txn_marker(9, 0, "abort", 0)
        log.roll()
    files = ",".join(
        str(p)
        for p in (
            fn.offset_index_file(path, 0),
            fn.time_index_file(path, 0),
            fn.transaction_index_file(path, 0),
            fn.producer_snapshot_file(path, 5),
        )
    )
    code, out, err = run("dump-log", "--files", files)
    assert code == 0 and err == ""
    assert "offset: 1 position: 70" in out
    assert f"timestamp: {NOW + 1} offset: 1" in out
    assert "version: 0 producerId: 9 firstOffset: 3 lastOffset: 4 lastStableOffset: 5" in out
    assert (
        "producerId: 9 producerEpoch: 0 coordinatorEpoch: 0 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {NOW} firstSequence: 0 lastSequence: 0 lastOffset: 3"
    ) in out
    _, out, _ = run(
        "dump-log", "--files", str(fn.offset_index_file(path, 0)), "--verify-index-only"
    )
    assert out.splitlines() == [f"Dumping {fn.offset_index_file(path, 0)}"]


def test_verify_names_segment_position_and_offset_of_a_flipped_bit(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    code, out, _ = run("verify", "--log-dirs", str(tmp_path))
    assert code == 0 and out.endswith("0 problem(s)\n")
    segment = fn.log_file(path, 0)
    data = bytearray(segment.read_bytes())
    first = int.from_bytes(data[8:12], "big") + 12
    data[first + 70] ^= 0x01  # inside the second batch's records
    segment.write_bytes(bytes(data))
    code, out, _ = run("verify", "--log-dirs", str(tmp_path))
    assert code == 1
    assert f"{segment}: position {first}: after offset 0:" in out
    assert "CRC" in out or "crc" in out


def test_topics_produce_consume_with_kafkas_partitioner(tmp_path: Path) -> None:
    d = str(tmp_path / "data")
    assert run("topics", "--log-dirs", d, "--create", "--topic", "c", "--partitions", "3")[0] == 0
    lines = "".join(f"user-{i}:event-{i}\n" for i in range(30))
    code, _, err = run(
        "produce", "--log-dirs", d, "--topic", "c", "--property", "parse.key=true",
        "--property", "key.separator=:", stdin=lines,
    )  # fmt: skip
    assert code == 0 and err == ""  # Kafka's console producer prints nothing
    code, out, err = run(
        "consume", "--log-dirs", d, "--topic", "c", "--property", "print.key=true",
        "--property", "print.partition=true", "--property", "key.separator=|",
        "--from-beginning", "--timeout-ms", "0",
    )  # fmt: skip
    assert code == 0 and "Processed a total of 30 messages" in err
    for line in out.splitlines():
        part, key, value = line.split("|")
        expected = (kp_murmur2(key.encode()) & 0x7FFFFFFF) % 3
        assert part == f"Partition:{expected}" and value == key.replace("user", "event")
    code, out, _ = run(
        "consume", "--log-dirs", d, "--topic", "c", "--from-beginning", "--max-messages", "2"
    )
    assert code == 0 and len(out.splitlines()) == 2
    code, out, _ = run("topics", "--log-dirs", d, "--describe", "--topic", "c")
    assert out.count("Partition:") == 3 and "PartitionCount: 3" in out
    assert run("topics", "--log-dirs", d, "--list")[1] == "c\n"
    assert run("topics", "--log-dirs", d, "--delete", "--topic", "c")[0] == 0


def test_murmur2_matches_kafka() -> None:
    assert murmur2(b"21") == -973932308  # Kafka's UtilsTest vector
    assert murmur2(b"") == 275646681
    for key in (b"a", b"ab", b"abc", b"abcd", b"user-42", bytes(range(200))):
        assert murmur2(key) & 0xFFFFFFFF == kp_murmur2(key) & 0xFFFFFFFF
    assert partition_for_key(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10


def test_compact_and_retention_commands(tmp_path: Path) -> None:
    d = str(tmp_path)
    run("topics", "--log-dirs", d, "--create", "--topic", "k", "--config", "cleanup.policy=compact")
    code, out, _ = run("compact", "--log-dirs", d)
    assert code == 0 and out == "nothing to compact\n"
    code, out, _ = run("retention", "--log-dirs", d)
    assert code == 0 and out == "deleted 0 segment(s)\n"


def test_retention_on_a_kafka_brokers_directory_takes_its_server_properties(
    tmp_path: Path,
) -> None:
    """A broker that keeps everything by its server.properties (log.retention.hours=-1) keeps
    everything under ``kafkalog retention --config``; without --config Kafka's seven days
    apply, and a directory Kafka formatted gets a warning saying so."""
    data = tmp_path / "data"
    with Log.open(data / "old-0", LogConfig(segment_bytes=1024), ManualClock(NOW)) as log:
        for i in range(40):  # from 2023: past seven days
            log.append([Record(b"v" * 100, b"k", timestamp=NOW + i)])
        assert len(log.segments) > 2
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    properties = tmp_path / "server.properties"
    properties.write_text("log.dirs=/elsewhere\nlog.retention.hours=-1\nnode.id=1\n")
    code, out, err = run("retention", "--log-dirs", str(data), "--config", str(properties))
    assert (code, out, err) == (0, "deleted 0 segment(s)\n", "")
    code, out, err = run("retention", "--log-dirs", str(data))
    assert code == 0 and out != "deleted 0 segment(s)\n"
    assert "is a Kafka broker's (meta.properties) and no --config" in err
    code, _, err = run("retention", "--log-dirs", str(data), "--config", str(tmp_path / "no"))
    assert code != 0 and err.startswith("error:") and err.count("\n") == 1


def test_user_errors_are_one_line_with_distinct_codes(tmp_path: Path) -> None:
    code, _, err = run("consume", "--log-dirs", str(tmp_path / "missing"), "--topic", "x")
    assert code == EXIT_NOT_FOUND and err.startswith("error: log directory")
    run("topics", "--log-dirs", str(tmp_path), "--create", "--topic", "x")
    code, _, err = run("consume", "--log-dirs", str(tmp_path), "--topic", "nope")
    assert code == EXIT_NOT_FOUND and err == "error: topic 'nope' does not exist\n"
    code, _, err = run(
        "consume", "--log-dirs", str(tmp_path), "--topic", "x", "--partition", "0", "--offset", "x"
    )
    assert code == 2 and "The provided offset value 'x' is incorrect" in err
    code, _, err = run("topics", "--log-dirs", str(tmp_path), "--create", "--topic", "bad/name")
    assert code == 5 and err.startswith("error:") and err[-1] == "\n" and err.count("\n") == 1
    code, _, err = run(
        "topics",
        "--log-dirs",
        str(tmp_path),
        "--create",
        "--topic",
        "y",
        "--config",
        "retention.ms=x",
    )
    assert code == 5 and "retention.ms" in err
    code, _, err = run("dump-log", "--files", str(tmp_path / "nope.log"))
    assert code == EXIT_NOT_FOUND and err.startswith("error: no such file")


def test_python_dash_m_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kafkalog", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "dump-log" in done.stdout and "verify" in done.stdout


def test_consume_sees_another_processs_appends(tmp_path: Path) -> None:
    """consume takes no lock and reads the files, so it sees what another process
    appends (here: this test process, while the consumer runs as a subprocess)."""
    run("topics", "--log-dirs", str(tmp_path), "--create", "--topic", "live")
    consumer = subprocess.Popen(
        [sys.executable, "-m", "kafkalog", "consume", "--log-dirs", str(tmp_path),
         "--topic", "live", "--from-beginning", "--max-messages", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with Log.open(tmp_path / "live-0", LogConfig(), ManualClock(NOW)) as log:
            for i in range(3):
                log.append([Record(f"m{i}".encode(), timestamp=NOW)])
        out, err = consumer.communicate(timeout=60)
    finally:
        consumer.kill()
    assert consumer.returncode == 0, err
    assert out.splitlines() == ["m0", "m1", "m2"]
    assert "Processed a total of 3 messages" in err


def test_perf_produce_and_consume_print_kafkas_summaries(tmp_path: Path) -> None:
    run("topics", "--log-dirs", str(tmp_path), "--create", "--topic", "p", "--partitions", "3")
    code, out, _ = run(
        "perf", "produce", "--log-dirs", str(tmp_path), "--topic", "p", "--num-records", "1000",
        "--record-size", "50", "--throughput", "-1", "--producer-props", "batch.size=1024",
        "compression.type=lz4",
    )  # fmt: skip
    assert code == 0
    summary = out.strip()
    assert summary.startswith("1000 records sent, ") and summary.endswith(" ms 99.9th.")
    for part in ("records/sec (", " MB/sec), ", " ms avg latency, ", " ms max latency, ",
                 " ms 50th, ", " ms 95th, ", " ms 99th, "):  # fmt: skip
        assert part in summary
    ends = []
    for p in range(3):
        with Log.open(tmp_path / f"p-{p}") as log:
            ends.append(log.log_end_offset)
    assert sum(ends) == 1000 and all(ends)  # sticky batches spread over every partition
    code, out, err = run(
        "perf", "consume", "--log-dirs", str(tmp_path), "--topic", "p", "--messages", "700"
    )
    assert code == 0
    header, values = out.splitlines()
    (latency,) = err.splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec, ")
    fields = values.split(", ")
    assert len(fields) == 10 and int(fields[4]) >= 700
    assert latency.startswith("fetch latency: ") and latency.endswith(" fetches.")
    code, _, err = run("perf", "produce", "--log-dirs", str(tmp_path), "--topic", "p",
                       "--num-records", "0")  # fmt: skip
    assert code == 5 and err == "error: --num-records must be > 0, not 0\n"


def test_throttler_and_percentiles_are_exact() -> None:
    from kafkalog.cli.perf_stats import LatencyStats, ThroughputThrottler

    now = [0.0]
    slept: list[float] = []
    throttler = ThroughputThrottler(100, clock=lambda: now[0], sleep=slept.append)
    throttler.throttle(50)  # 50 records at t=0 are 0.5 s ahead of 100/s
    now[0] = 1.0
    throttler.throttle(50)  # behind schedule: no sleep
    assert slept == [0.5]
    stats = LatencyStats([float(i) for i in range(1, 101)])
    assert (stats.percentile(0.5), stats.percentile(0.99), stats.max) == (51.0, 100.0, 100.0)


def test_progress_bar_only_on_a_terminal() -> None:
    import io

    from rich.console import Console

    from kafkalog.cli.progress import progress

    with progress("x", 10) as advance:  # stderr is not a terminal under pytest
        advance(10)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80)
    with progress("verify", 4, console=console) as advance:
        advance(4)
    assert "verify" in buffer.getvalue()


def test_dump_log_decoder_classes_refuse_what_kafkalog_cannot_run(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    segment = str(directory / "00000000000000000000.log")
    code, out, err = run("dump-log", "--files", segment, "--value-decoder-class", "com.acme.Avro")
    assert code == 5 and out == "" and "cannot load other classes" in err
    code, _, err = run("dump-log", "--files", segment, "--value-decoder-class",
                       "org.apache.kafka.tools.api.LongDecoder")  # fmt: skip
    assert code == 5 and "LongDecoder cannot decode the value at offset 0" in err
    code, out, _ = run("dump-log", "--files", segment, "--key-decoder-class")  # alone: String
    assert code == 0 and " payload: " in out


def test_a_damaged_metadata_record_is_a_line_not_a_crash() -> None:
    from kafkalog.cli.metadata_decoder import metadata_json

    assert metadata_json(b"\x01\x63\x00", 7) == "Error at 7, skipping. Unknown metadata id 99"
    assert metadata_json(b"\x02\x02\x00", 8).startswith("Error at 8, skipping. ")
    truncated = metadata_json(b"\x01\x02\x00\x05ab", 9)  # a TopicRecord whose name is cut
    assert truncated.startswith("Error at 9, skipping. a metadata record field of 4 bytes")
    topic = bytes([1, 2, 0, 7]) + b"clicks" + bytes(16) + b"\x00"  # compact: length + 1
    assert metadata_json(topic, 0) == (
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"clicks",'
        '"topicId":"AAAAAAAAAAAAAAAAAAAAAA"}}'
    )


def test_the_command_does_not_load_the_server_or_kio_until_asked() -> None:
    """Every kafkalog command pays for what it imports before its first line (dump-log's
    first line within a second is a bench target): kafkalog.server and kio's protocol
    schemas take a quarter second and only serve and consume --group need them."""
    probe = (
        "import sys, kafkalog.cli.main; "
        "print(sorted(m for m in sys.modules if m.startswith(('kafkalog.server', 'kio'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    assert out.strip() == "[]"


def test_every_subcommand_is_listed_and_loads_by_its_own_name() -> None:
    """Subcommands other than dump-log are imported on demand (LAZY_COMMANDS): each name must
    load the command it names, and ``--help`` must list them all."""
    listing = CliRunner().invoke(cli, ["--help"]).output
    for name in LAZY_COMMANDS:
        assert f"  {name} " in listing, name
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert f"Usage: cli {name} " in result.output, name
    assert "  dump-log " in listing
    unknown = CliRunner().invoke(cli, ["serve-all"])
    assert unknown.exit_code == 2
    assert "No such command 'serve-all'" in unknown.output
