"""``kafkalog consume`` as kafka-console-consumer: its start position (latest unless
--from-beginning or --offset), its waiting (until --max-messages or --timeout-ms), its usage
errors in Kafka's words, and DefaultMessageFormatter's output, property for property."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kafkalog import Log, LogConfig, ManualClock, Record
from kafkalog.cli.formatter import MessageFormatter
from kafkalog.cli.main import cli
from kafkalog.types import TimestampType

NOW = 1_700_000_000_000


def run(*args: str) -> tuple[int, bytes, str]:
    result = CliRunner().invoke(cli, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout_bytes, result.stderr


def topic(tmp_path: Path, config: dict[str, str] | None = None) -> str:
    with Log.open(
        tmp_path / "t-0", LogConfig.from_properties(config or {}), ManualClock(NOW)
    ) as log:
        log.append([Record(b"v0", b"k0", [("h", b"x"), ("n", None)], timestamp=NOW)])
        log.append([Record(None, None, timestamp=NOW + 1)])
    return str(tmp_path)


def test_by_default_it_starts_at_the_end_and_waits_until_the_timeout(tmp_path: Path) -> None:
    d = topic(tmp_path)
    code, out, err = run("consume", "--log-dirs", d, "--topic", "t", "--timeout-ms", "200")
    assert code == 0 and out == b""
    assert "TimeoutException" in err and err.endswith("Processed a total of 0 messages\n")
    code, out, err = run(
        "consume", "--log-dirs", d, "--topic", "t", "--from-beginning", "--timeout-ms", "200"
    )
    assert code == 0 and out == b"v0\nnull\n" and "a total of 2 messages" in err
    code, out, _ = run(
        "consume", "--log-dirs", d, "--topic", "t", "--partition", "0", "--offset", "1",
        "--timeout-ms", "0",
    )  # fmt: skip
    assert out == b"null\n"
    code, out, _ = run(
        "consume", "--log-dirs", d, "--topic", "t", "--from-beginning", "--timeout-ms", "-1",
        "--max-messages", "2",
    )  # fmt: skip
    assert out == b"v0\nnull\n"  # a negative timeout waits, as in Kafka: the count ends it
    code, out, _ = run(
        "consume", "--log-dirs", d, "--topic", "t", "--partition", "0", "--offset", "EARLIEST",
        "--max-messages", "1",
    )  # fmt: skip
    assert out == b"v0\n"


def test_usage_errors_are_kafkas(tmp_path: Path) -> None:
    d = topic(tmp_path)
    code, _, err = run("consume", "--log-dirs", d, "--topic", "t", "--offset", "0")
    assert code == 2 and "The partition is required when offset is specified." in err
    code, _, err = run(
        "consume", "--log-dirs", d, "--topic", "t", "--partition", "0", "--offset", "0",
        "--from-beginning",
    )  # fmt: skip
    assert code == 2 and "from-beginning and offset cannot be specified together" in err
    code, _, err = run(
        "consume", "--log-dirs", d, "--topic", "t", "--partition", "0", "--offset", "-3"
    )
    assert code == 2 and "a non-negative long" in err
    for none in ("0", "-2"):  # Kafka's loop: while count < max, or max == -1
        code, out, err = run(
            "consume", "--log-dirs", d, "--topic", "t", "--from-beginning", "--max-messages", none
        )
        assert (code, out, err.strip()) == (0, b"", "Processed a total of 0 messages")
    code, _, err = run(
        "consume", "--log-dirs", d, "--topic", "t", "--from-beginning", "--max-messages", "-1",
        "--timeout-ms", "0",
    )  # fmt: skip
    assert code == 0 and "a total of 2 messages" in err  # -1: read on


def test_it_waits_for_appends_from_the_end(tmp_path: Path) -> None:
    """Started at the end of a topic with data, it prints only what is appended after."""
    d = topic(tmp_path)
    consumer = subprocess.Popen(
        [sys.executable, "-m", "kafkalog", "consume", "--log-dirs", d, "--topic", "t",
         "--max-messages", "1", "--timeout-ms", "60000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        with Log.open(tmp_path / "t-0", LogConfig(), ManualClock(NOW)) as log:
            # the consumer may start before or after this append: until it has printed, keep
            # appending, so the first record it sees is one appended after it started
            for i in range(600):
                log.append([Record(b"new-%d" % i, timestamp=NOW)])
                try:
                    consumer.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    continue
        out, err = consumer.communicate(timeout=60)
    finally:
        consumer.kill()
    assert consumer.returncode == 0, err
    assert out.startswith(b"new-") and out.count(b"\n") == 1


def test_print_timestamp_names_the_type_kafka_does(tmp_path: Path) -> None:
    create = topic(tmp_path / "create")
    append = topic(tmp_path / "append", {"message.timestamp.type": "LogAppendTime"})
    args = ["--topic", "t", "--from-beginning", "--timeout-ms", "0"]
    prop = ["--formatter-property", "print.timestamp=TRUE"]  # Kafka's booleans ignore case
    _, out, _ = run("consume", "--log-dirs", create, *args, *prop)
    assert out == b"CreateTime:%d\tv0\nCreateTime:%d\tnull\n" % (NOW, NOW + 1)
    _, out, _ = run("consume", "--log-dirs", append, *args, *prop)
    assert all(line.startswith(b"LogAppendTime:") for line in out.splitlines())


def test_every_formatter_property_as_kafkas_default_message_formatter() -> None:
    record = Record(b"val", b"key", [("h", b"x"), ("n", None)], timestamp=NOW, offset=7)
    bare = Record(None, None, timestamp=NOW, offset=8)

    def fmt(r: Record, ts: TimestampType = TimestampType.CREATE_TIME, **props: str) -> bytes:
        return MessageFormatter.from_properties(props).format(r, 3, ts)

    assert fmt(record) == b"val\n"
    everything = {
        "print.timestamp": "true", "print.partition": "true", "print.offset": "true",
        "print.headers": "true", "print.key": "true",
    }  # fmt: skip
    assert fmt(record, **everything) == (
        b"CreateTime:%d\tPartition:3\tOffset:7\th:x,n:null\tkey\tval\n" % NOW
    )
    assert fmt(bare, TimestampType.NO_TIMESTAMP_TYPE, **everything) == (
        b"NO_TIMESTAMP\tPartition:3\tOffset:8\tNO_HEADERS\tnull\tnull\n"
    )
    assert fmt(bare, **{"print.key": "true", "null.literal": "<nil>"}) == b"<nil>\t<nil>\n"
    assert fmt(record, **{"print.key": "true", "print.value": "false"}) == b"key\n"
    assert fmt(record, **{"print.value": "false"}) == b""  # nothing printed, no line either
    assert fmt(record, **{"print.key": " True ", "key.separator": " | "}) == b"key | val\n"
    assert fmt(record, **{"line.separator": "\r\n"}) == b"val\r\n"
    assert fmt(record, **{"print.headers": "true", "headers.separator": ";"}) == (
        b"h:x;n:null\tval\n"
    )
    assert fmt(record, **{"print.key": "yes"}) == b"val\n"  # only "true" is true
    assert fmt(Record(b"\xff\x00", timestamp=NOW, offset=0)) == b"\xff\x00\n"  # raw bytes


def test_warnings_go_to_stderr_once_in_kafkas_tool_format(tmp_path: Path) -> None:
    """recover prints each repair on stdout itself; the loader's warning of the same repair is
    not printed a second time, and a warning elsewhere gets one formatted stderr line."""
    import logging

    with Log.open(tmp_path / "t-0", LogConfig(), ManualClock(NOW)) as log:
        log.append([Record(b"x", timestamp=NOW)])
    with open(tmp_path / "t-0" / "00000000000000000000.log", "ab") as f:
        f.write(b"garbage")
    code, out, err = run("recover", str(tmp_path / "t-0"))
    assert code == 0 and out.count(b"truncated 7 bytes") == 1 and "truncated" not in err
    code, out, err = run("recover", str(tmp_path / "t-0"))  # a second command, same process
    assert b"nothing to repair" in out and err == ""
    handlers = [h for h in logging.getLogger("kafkalog").handlers if hasattr(h, "kafkalog_cli")]
    assert len(handlers) == 1
    code, _, err = run("consume", "--log-dirs", str(tmp_path), "--topic", "t", "--timeout-ms", "0")
    assert err.count("TimeoutException") == 1


def test_group_resumes_from_its_commit_in_consumer_offsets(tmp_path: Path) -> None:
    """--group: the first run starts as auto.offset.reset says (--from-beginning: earliest) and
    commits where it stopped, in Kafka's OffsetCommit records; the next run resumes there;
    kafkalog serve's loader (load_offsets) and dump-log --offsets-decoder read the commit."""
    from kafkalog import LogManager
    from kafkalog.coordinator.offsets_store import load_offsets, partition_for

    d = tmp_path / "data"
    with LogManager([d]) as manager:
        manager.create_topic("clicks", 2)
        for p in range(2):
            manager.get_log("clicks", p).append([Record(b"p%d-%d" % (p, i)) for i in range(5)])
    args = ("consume", "--log-dirs", str(d), "--topic", "clicks", "--group", "g",
            "--timeout-ms", "0")  # fmt: skip
    code, out, _ = run(*args, "--from-beginning", "--max-messages", "7")
    assert code == 0 and len(out.splitlines()) == 7
    code, out, _ = run(*args)  # resumes: the 3 not yet printed, whatever --from-beginning says
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = run(*args, "--from-beginning")
    assert code == 0 and out == b""  # everything committed
    with LogManager([d]) as manager:
        logs = {p: manager.get_log("__consumer_offsets", p) for p in range(50)}
        committed = load_offsets(logs).committed["g"]
    assert {tp: o.offset for tp, o in committed.items()} == {("clicks", 0): 5, ("clicks", 1): 5}
    segment = d / f"__consumer_offsets-{partition_for('g', 50)}" / "00000000000000000000.log"
    code, out, _ = run("dump-log", "--files", str(segment), "--offsets-decoder")
    assert code == 0 and b'"group":"g","topic":"clicks","partition":1' in out


def test_group_refuses_a_partition_and_a_held_directory(tmp_path: Path) -> None:
    from kafkalog import LogManager

    d = tmp_path / "data"
    code, _, err = run("consume", "--log-dirs", str(tmp_path), "--topic", "t", "--group", "g",
                       "--partition", "0")  # fmt: skip
    assert code == 2 and "Options group and partition cannot be specified together." in err
    with LogManager([d]) as manager:  # kafkalog serve or any writer holding the directory
        manager.create_topic("t", 1)
        code, _, err = run("consume", "--log-dirs", str(d), "--topic", "t", "--group", "g",
                           "--timeout-ms", "0")  # fmt: skip
        assert code == 6 and "--group commits to" in err and "with a Kafka client" in err
        code, _, _ = run("consume", "--log-dirs", str(d), "--topic", "t", "--timeout-ms", "0")
        assert code == 0  # without --group no lock is needed
