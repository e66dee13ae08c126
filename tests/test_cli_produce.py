"""``kafkalog produce`` as kafka-console-producer: its flags, and what it writes when a line is
refused (the lines before it, as Kafka's producer has sent them). How a line becomes a record
is checked against Kafka's own parser in test_kafka_oracle_console.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli.console import parse_properties
from kafkalog.cli.errors import EXIT_INVALID, EXIT_NOT_FOUND
from kafkalog.cli.main import cli
from kafkalog.log.view import PartitionView
from kafkalog.types import CompressionType

pytestmark = pytest.mark.one_codec  # the CLI's own behaviour; codecs are covered elsewhere


def run(*args: str, stdin: bytes | str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def data(tmp_path: Path) -> str:
    d = str(tmp_path / "data")
    assert run("topics", "--log-dirs", d, "--create", "--topic", "t", "--partitions", "1")[0] == 0
    return d


def batches(data: str) -> list[tuple[CompressionType, list[tuple[bytes | None, bytes | None]]]]:
    view = PartitionView(Path(data) / "t-0")
    return [(b.compression, [(r.key, r.value) for r in b]) for b in view.batches(0)]


def test_compression_codec_alone_means_gzip_as_kafkas(data: str) -> None:
    assert run("produce", "--log-dirs", data, "--topic", "t", "--compression-codec",
               stdin="a\n")[0] == 0  # fmt: skip
    assert run("produce", "--log-dirs", data, "--topic", "t", "--compression-codec", "lz4",
               stdin="b\n")[0] == 0  # fmt: skip
    assert run("produce", "--log-dirs", data, "--topic", "t", "--compression", "zstd",
               stdin="c\n")[0] == 0  # fmt: skip
    assert [c for c, _ in batches(data)] == [
        CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD,
    ]  # fmt: skip
    code, _, err = run("produce", "--log-dirs", data, "--topic", "t", "--compression-codec",
                       "LZ4", stdin="d\n")  # fmt: skip
    assert code == 2 and "'LZ4' is not one of" in err  # Kafka's values are case-sensitive


def test_lines_before_a_refused_line_are_written(data: str) -> None:
    lines = "".join(f"k{i}|v{i}\n" for i in range(1500)) + "no separator\nk|after\n"
    code, _, err = run("produce", "--log-dirs", data, "--topic", "t", "--property",
                       "parse.key=true", "--property", "key.separator=|", stdin=lines)  # fmt: skip
    assert code == EXIT_INVALID
    assert "No key separator found on line number 1501: 'no separator'" in err
    records = [kv for _, rs in batches(data) for kv in rs]
    assert records == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(1500)]


def test_sync_appends_a_batch_per_line_and_crlf_is_a_line_end(data: str) -> None:
    assert run("produce", "--log-dirs", data, "--topic", "t", "--sync",
               stdin=b"one\r\ntwo\r\nthree")[0] == 0  # fmt: skip
    assert batches(data) == [
        (CompressionType.NONE, [(None, b"one")]),
        (CompressionType.NONE, [(None, b"two")]),
        (CompressionType.NONE, [(None, b"three")]),
    ]


def test_properties_as_kafkas_arguments() -> None:
    # a missing value is "" (Kafka's parseKeyValueArgs); \t and \uXXXX are typed escapes; other
    # characters, ASCII or not, are kept as they are
    assert parse_properties(("a", "b=", "c=x=y", "d=\\t", "e=→\\u2192", "f=C:\\\\dir")) == {
        "a": "", "b": "", "c": "x=y", "d": "\t", "e": "→→", "f": "C:\\dir",
    }  # fmt: skip


def test_a_partition_the_topic_lacks_is_refused_before_reading(data: str) -> None:
    code, _, err = run("produce", "--log-dirs", data, "--topic", "t", "--partition", "3",
                       stdin="x\n")  # fmt: skip
    assert code == EXIT_NOT_FOUND and "partition 3 of 't' does not exist (it has 1)" in err
    assert batches(data) == []


def test_producing_to_a_new_topic_creates_it_as_a_broker_would(tmp_path: Path) -> None:
    """Kafka's console and perf producers against a broker auto-create a missing topic
    (``auto.create.topics.enable``, ``num.partitions``); so do kafkalog's on the files."""
    code, _, err = run("produce", "--log-dirs", str(tmp_path), "--topic", "fresh", stdin=b"a\nb\n")
    assert code == 0 and "created topic fresh with 1 partition(s)" in err
    code, out, _ = run(
        "perf",
        "produce",
        "--log-dirs",
        str(tmp_path),
        "--topic",
        "perf",
        "--num-records",
        "10",
        "--record-size",
        "10",
        "--throughput",
        "-1",
    )
    assert code == 0 and "10 records sent" in out
    code, out, _ = run("get-offsets", "--log-dirs", str(tmp_path))
    assert out.split() == ["fresh:0:2", "perf:0:10"]
