"""The flags of Kafka 4.3's tools that kafkalog's commands take besides their own: consume's
--include, --formatter, --formatter-config and consumer configs (ConsoleConsumerOptions'
rules), produce's --reader-config, --line-reader and producer configs, topics'
--topics-with-overrides (TopicCommand's DescribeOptions), configs' --topic, --broker,
--broker-defaults and --add-config-file."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kafkalog import Log, LogConfig, ManualClock, Record
from kafkalog.cli.main import cli

NOW = 1_700_000_000_000


def run(*args: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout_bytes, result.stderr


def logs(tmp_path: Path, *names: str) -> str:
    for i, name in enumerate(names):
        with Log.open(tmp_path / f"{name}-0", LogConfig(), ManualClock(NOW)) as log:
            log.append([Record(f"{name}{i}".encode(), timestamp=NOW)])
    return str(tmp_path)


def test_consume_include_reads_every_topic_the_pattern_matches_whole(tmp_path: Path) -> None:
    d = logs(tmp_path, "clicks", "clicks2", "views", "__consumer_offsets")
    code, out, _ = run("consume", "--log-dirs", d, "--include", "clicks.*", "--from-beginning",
                       "--timeout-ms", "100")  # fmt: skip
    assert code == 0 and sorted(out.split()) == [b"clicks0", b"clicks21"]
    code, out, _ = run("consume", "--log-dirs", d, "--include", ".*", "--from-beginning",
                       "--timeout-ms", "100")  # fmt: skip
    assert b"__consumer_offsets3" not in out  # internal topics left out, as a pattern leaves them
    code, _, err = run("consume", "--log-dirs", d, "--timeout-ms", "100")
    assert code == 2 and "Exactly one of --include/--topic is required." in err
    code, _, err = run("consume", "--log-dirs", d, "--include", "c.*", "--partition", "0")
    assert code == 2 and "The topic is required when partition is specified." in err


def test_consume_formatter_is_kafkas_default_and_its_config_file_yields(tmp_path: Path) -> None:
    d = logs(tmp_path, "t")
    props = tmp_path / "f.properties"
    props.write_text("print.offset=true\nprint.value=false\n")
    code, out, _ = run(
        "consume", "--log-dirs", d, "--topic", "t", "--from-beginning", "--timeout-ms", "100",
        "--formatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
        "--formatter-config", str(props), "--formatter-property", "print.value=true",
    )  # fmt: skip
    assert code == 0 and out == b"Offset:0\tt0\n"
    code, _, err = run("consume", "--log-dirs", d, "--topic", "t",
                       "--formatter", "kafka.tools.LoggingMessageFormatter")  # fmt: skip
    assert code == 2 and "DefaultMessageFormatter only" in err


def test_consumer_configs_as_console_consumer_resolves_them(tmp_path: Path) -> None:
    d = logs(tmp_path, "t")
    code, out, err = run(
        "consume", "--log-dirs", d, "--topic", "t", "--timeout-ms", "100",
        "--consumer-property", "auto.offset.reset=earliest",
        "--consumer-property", "fetch.min.bytes=1",
    )  # fmt: skip
    assert code == 0 and out == b"t0\n"
    assert "these consumer configs have no effect: fetch.min.bytes" in err
    code, _, err = run("consume", "--log-dirs", d, "--topic", "t", "--from-beginning",
                       "--command-property", "auto.offset.reset=latest")  # fmt: skip
    assert code == 2 and "Can't simultaneously specify --from-beginning and" in err
    config = tmp_path / "c.properties"
    config.write_text("group.id=a\n")
    code, _, err = run("consume", "--log-dirs", d, "--topic", "t", "--group", "b",
                       "--consumer.config", str(config))  # fmt: skip
    assert code == 2 and "Detected group ids: 'b', 'a'" in err
    code, _, err = run("consume", "--log-dirs", d, "--topic", "t", "--partition", "0",
                       "--consumer-property", "group.id=a")  # fmt: skip
    assert code == 2 and "Options group and partition cannot be specified together." in err
    code, _, err = run("consume", "--log-dirs", d, "--topic", "t",
                       "--consumer-property", "isolation.level=serializable")  # fmt: skip
    assert code == 5 and "isolation.level" in err


def test_produce_reader_config_line_reader_and_producer_configs(tmp_path: Path) -> None:
    d = logs(tmp_path, "t")
    reader = tmp_path / "r.properties"
    reader.write_text("parse.key=true\nkey.separator=|\n")
    code, _, err = run(
        "produce", "--log-dirs", d, "--topic", "t", "--reader-config", str(reader),
        "--line-reader", "org.apache.kafka.tools.LineMessageReader",
        "--producer-property", "acks=all", "--command-property", "linger.ms=5",
        stdin=b"k|v\n",
    )  # fmt: skip
    assert code == 0, err
    assert "these producer configs have no effect: acks, linger.ms" in err
    code, out, _ = run("consume", "--log-dirs", d, "--topic", "t", "--from-beginning",
                       "--timeout-ms", "100", "--property", "print.key=true")  # fmt: skip
    assert out.endswith(b"k\tv\n")
    code, _, err = run("produce", "--log-dirs", d, "--topic", "t", "--line-reader", "my.Reader")
    assert code == 2 and "LineMessageReader only" in err


def test_topics_with_overrides_prints_only_their_topic_lines(tmp_path: Path) -> None:
    d = str(tmp_path)
    run("topics", "--log-dirs", d, "--create", "--topic", "plain")
    run("topics", "--log-dirs", d, "--create", "--topic", "tuned", "--config", "retention.ms=5")
    code, out, _ = run("topics", "--log-dirs", d, "--describe", "--topics-with-overrides")
    lines = out.decode().splitlines()
    assert code == 0 and len(lines) == 1
    assert lines[0].startswith("Topic: tuned\t") and lines[0].endswith("Configs: retention.ms=5")
    code, _, err = run("topics", "--log-dirs", d, "--list", "--topics-with-overrides")
    assert code == 2 and "go with --describe only" in err


def test_configs_shorthands_and_add_config_file(tmp_path: Path) -> None:
    d = str(tmp_path)
    run("topics", "--log-dirs", d, "--create", "--topic", "t")
    props = tmp_path / "add.properties"
    props.write_text("retention.ms=77\ncleanup.policy=compact\n")
    code, out, err = run("configs", "--log-dirs", d, "--topic", "t", "--alter",
                         "--add-config-file", str(props))  # fmt: skip
    assert code == 0, err
    code, out, _ = run("configs", "--log-dirs", d, "--topic", "t", "--describe")
    assert b"retention.ms=77" in out and b"cleanup.policy=compact" in out
    code, out, _ = run("configs", "--log-dirs", d, "--broker-defaults", "--describe")
    assert code == 0 and out.startswith(b"Default configs for brokers in the cluster are:")
    code, _, err = run("configs", "--log-dirs", d, "--topic", "t", "--entity-name", "t",
                       "--describe")  # fmt: skip
    assert code == 2 and "name the entity once" in err
