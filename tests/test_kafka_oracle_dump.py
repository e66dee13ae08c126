"""``kafkalog dump-log`` prints what Kafka's own DumpLogSegments prints, byte for byte.

Every file the oracle broker left (segments, indexes, time indexes, transaction indexes,
producer snapshots, the internal topics with their decoders) is dumped by both tools with the
same options; each Kafka version is matched with ``--kafka-version`` set to it, and the default
matches 4.x.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kafka_oracle import (
    JVM_FLAGS,
    KAFKA_VERSIONS,
    TOOL_LOG,
    KafkaBroker,
    classpath,
    dump_log_segments_class,
    java,
)
from kafka_scenarios import BrokerWritten

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
USER_TOPICS_OPTIONS = [
    (),
    ("--deep-iteration",),
    ("--deep-iteration", "--print-data-log"),
    ("--print-data-log", "--skip-record-metadata"),
    ("--index-sanity-check",),
    ("--verify-index-only",),
]
INTERNAL_OPTIONS = {
    "__consumer_offsets": [("--offsets-decoder",), ("--offsets-decoder", "--skip-record-metadata")],
    "__transaction_state": [
        ("--transaction-log-decoder",),
        ("--transaction-log-decoder", "--skip-record-metadata"),
    ],
    "__share_group_state": [
        ("--share-group-state-decoder",),
        ("--share-group-state-decoder", "--skip-record-metadata"),
    ],
}


def files_of(data_dir: Path, internal: str | None) -> list[str]:
    out = []
    for part in sorted(data_dir.iterdir()):
        if not part.is_dir() or part.name.startswith(("__",)) != (internal is not None):
            continue
        if internal is not None and not part.name.startswith(internal):
            continue
        out += [str(f) for f in sorted(part.iterdir()) if f.suffix in SUFFIXES]
    return out


def kafka_dump(version: str, files: list[str], options: tuple[str, ...]) -> tuple[str, str]:
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version),
           dump_log_segments_class(version), "--files", ",".join(files), *options]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, proc.stderr


def kafkalog_dump(files: list[str], options: tuple[str, ...], *extra: str) -> tuple[str, str]:
    cmd = [sys.executable, "-m", "kafkalog", "dump-log", "--files", ",".join(files), *options,
           *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, proc.stderr


def first_difference(want: str, got: str) -> str:
    for i, (a, b) in enumerate(zip(want.splitlines(), got.splitlines(), strict=False)):
        if a != b:
            return f"line {i + 1}:\nkafka:    {a}\nkafkalog: {b}"
    return f"line counts differ: kafka {len(want.splitlines())}, kafkalog {len(got.splitlines())}"


def kafka_errors(stderr: str) -> str:
    """DumpLogSegments' own report lines, without the JVM's or log4j's chatter."""
    return "\n".join(line for line in stderr.splitlines() if not line.startswith(("[", "SLF4J")))


@pytest.mark.parametrize("options", USER_TOPICS_OPTIONS, ids=" ".join)
def test_user_topic_files_dump_identically(
    written: BrokerWritten, options: tuple[str, ...]
) -> None:
    files = files_of(written.data_dir, None)
    assert any(f.endswith(".txnindex") for f in files) and any(
        f.endswith(".snapshot") for f in files
    )
    want, want_err = kafka_dump(written.version, files, options)
    major_minor = ".".join(written.version.split(".")[:2])
    got, got_err = kafkalog_dump(files, options, "--kafka-version", major_minor)
    assert got == want, first_difference(want, got)
    assert got_err.strip() == kafka_errors(want_err).strip()


@pytest.mark.parametrize("topic", sorted(INTERNAL_OPTIONS))
def test_internal_topics_decode_identically(written: BrokerWritten, topic: str) -> None:
    if topic == "__share_group_state" and written.version.startswith("3."):
        pytest.skip("Kafka 3.9 has no share groups")
    files = files_of(written.data_dir, topic)
    assert any(f.endswith(".log") for f in files)
    major_minor = ".".join(written.version.split(".")[:2])
    for options in INTERNAL_OPTIONS[topic]:
        want, _ = kafka_dump(written.version, files, options)
        got, _ = kafkalog_dump(files, options, "--kafka-version", major_minor)
        assert got == want, (options, first_difference(want, got))
        if written.version.startswith("4."):  # the default is Kafka 4.x's output
            assert kafkalog_dump(files, options)[0] == want


@pytest.fixture(scope="module", params=KAFKA_VERSIONS)
def kraft_files(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[str]]:
    """A dynamic-quorum broker's metadata files: bootstrap.checkpoint, the first snapshot
    (``<offset>-<epoch>.checkpoint``) and the metadata log with its KRaft control records."""
    version: str = request.param
    broker = KafkaBroker(version, tmp_path_factory.mktemp(f"kraft-{version}"), standalone=True)
    broker.start()
    try:  # a topic with a config: TopicRecord, PartitionRecords and a ConfigRecord in the log
        java(version, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
             broker.bootstrap, "--create", "--topic", "meta", "--partitions", "2",
             "--config", "cleanup.policy=compact")  # fmt: skip
    finally:
        broker.stop()
    metadata = broker.root / "metadata"
    partition = metadata / "__cluster_metadata-0"
    files = [metadata / "bootstrap.checkpoint", *sorted(partition.glob("*.checkpoint")),
             *sorted(partition.glob("*.log"))]  # fmt: skip
    assert any("-" in f.name for f in files)  # the snapshot KIP-853's format wrote
    return version, [str(f) for f in files]


@pytest.mark.one_codec  # metadata records are uncompressed; the codecs are covered above
@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--deep-iteration",),
        ("--print-data-log", "--skip-record-metadata"),
        ("--cluster-metadata-decoder",),
        ("--cluster-metadata-decoder", "--skip-record-metadata"),
    ],
    ids=" ".join,
)
def test_kraft_metadata_logs_and_snapshots_dump_identically(
    kraft_files: tuple[str, list[str]], options: tuple[str, ...]
) -> None:
    version, files = kraft_files
    want, want_err = kafka_dump(version, files, options)
    major_minor = ".".join(version.split(".")[:2])
    got, got_err = kafkalog_dump(files, options, "--kafka-version", major_minor)
    assert "KRaftVoters {" in want or "--deep-iteration" not in options
    if "--cluster-metadata-decoder" in options:
        for kind in ("TOPIC_RECORD", "PARTITION_RECORD", "CONFIG_RECORD", "REGISTER_BROKER"):
            assert f'"type":"{kind}' in want, kind
    assert got == want, first_difference(want, got)
    assert got_err.strip() == kafka_errors(want_err).strip()


GOLDEN = Path(__file__).parent / "golden" / "dump"


@pytest.mark.one_codec  # v0/v1 messages have one decoder
@pytest.mark.parametrize("version", KAFKA_VERSIONS)
@pytest.mark.parametrize(
    "name", ["spec-legacy", "broker-v0", "broker-v1", "compressed", "timestamp-zero"]
)
def test_legacy_and_compressed_segments_dump_identically(
    tmp_path: Path, version: str, name: str
) -> None:
    """v0/v1 messages and a gzip v1 wrapper among v2 batches of every codec: inner messages
    print their own CRC and validity, as Kafka's deep iteration does."""
    segment = tmp_path / "00000000000000000000.log"
    if name == "timestamp-zero":  # a CreateTime of 0 is a time, not "no timestamp"
        from kafkalog import MemoryRecords, Record

        segment.write_bytes(b"".join(bytes(MemoryRecords.build(records, **kw)) for records, kw in [
            ([Record(b"v", b"k", timestamp=0)], {"magic": 1}),
            ([Record(b"v", b"k", timestamp=0), Record(b"w", None, timestamp=0)],
             {"base_offset": 1}),
            ([Record(b"z", b"k", timestamp=0)], {"magic": 1, "compression": "gzip",
                                                  "base_offset": 3}),
        ]))  # fmt: skip
    else:
        hex_text = (GOLDEN / f"{name}.00000000000000000000.log.hex").read_text()
        segment.write_bytes(bytes.fromhex("".join(hex_text.split())))
    major_minor = ".".join(version.split(".")[:2])
    for options in [("--deep-iteration",), ("--print-data-log",)]:
        want, want_err = kafka_dump(version, [str(segment)], options)
        got, got_err = kafkalog_dump([str(segment)], options, "--kafka-version", major_minor)
        assert got == want, (options, first_difference(want, got))
        assert got_err.strip() == kafka_errors(want_err).strip()


@pytest.mark.one_codec  # the decoders run on decoded records, whichever codec decoded them
@pytest.mark.parametrize("version", KAFKA_VERSIONS)
def test_decoder_classes_print_as_kafkas(tmp_path: Path, version: str) -> None:
    """Kafka's StringDecoder, IntegerDecoder and LongDecoder, by their 4.x and 3.x names."""
    from kafkalog import Log, LogConfig, Record

    with Log.open(tmp_path / "t-0", LogConfig()) as log:
        log.append([Record((i * 1_000_003 - 7).to_bytes(8, "big", signed=True),
                           (-i).to_bytes(4, "big", signed=True), timestamp=1_700_000_000_000)
                    for i in range(5)])  # fmt: skip
        log.append([Record(None, b"\x00\x00\x00\x07", timestamp=1_700_000_000_000)])
    segment = [str(tmp_path / "t-0" / "00000000000000000000.log")]
    api = "org.apache.kafka.tools.api." if version.startswith("4.") else "kafka.serializer."
    major_minor = ".".join(version.split(".")[:2])
    for options in (
        ("--key-decoder-class", f"{api}IntegerDecoder", "--value-decoder-class",
         f"{api}LongDecoder"),
        ("--key-decoder-class", f"{api}IntegerDecoder"),
        ("--value-decoder-class", f"{api}StringDecoder", "--skip-record-metadata"),
    ):  # fmt: skip
        want, _ = kafka_dump(version, segment, options)
        got, _ = kafkalog_dump(segment, options, "--kafka-version", major_minor)
        assert got == want, (options, first_difference(want, got))


def test_the_metadata_schemas_are_generated_from_kafkas_own() -> None:
    """src/kafkalog/records/metadata_schemas.py and coordinator_schemas.py are what
    interop/gen_metadata_schemas.py makes of the newest pinned Kafka's jars (regenerate them
    after a version bump)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_metadata_schemas", Path(__file__).parent.parent / "interop/gen_metadata_schemas.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    jar = generator.default_jar()
    assert generator.render(jar, generator.schemas(jar)) == generator.OUT.read_text()
    # and the coordinators' record formats, from the coordinator and client jars
    jars = generator.coordinator_jars()
    rendered = generator.render_coordinator(jars, generator.coordinator_schemas(jars))
    assert rendered == generator.COORDINATOR_OUT.read_text()
