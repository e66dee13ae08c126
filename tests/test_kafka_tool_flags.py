"""Kafka's tool flags side by side with kafkalog's commands.

A Kafka user types the flags of Kafka 4.3's tools. For each tool kafkalog mirrors, its
``--help`` (run from ``make kafka-oracle``'s jars) gives the flags; each must be taken by the
kafkalog command or listed, with a reason, in ``docs/cli.md``'s table of flags kafkalog does
not take. A listed flag that kafkalog has since learned fails too, so the table stays true.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click
import pytest

from kafka_oracle import JVM_FLAGS, TOOL_LOG, classpath
from kafkalog.cli.main import cli

pytestmark = [pytest.mark.kafka, pytest.mark.one_codec]

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
KAFKA_VERSION = "4.3.1"
MIRRORED = {  # kafkalog command -> the Kafka 4.3 class its tool script runs
    "topics": "org.apache.kafka.tools.TopicCommand",
    "configs": "kafka.admin.ConfigCommand",
    "produce": "org.apache.kafka.tools.ConsoleProducer",
    "consume": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "perf produce": "org.apache.kafka.tools.ProducerPerformance",
    "perf consume": "org.apache.kafka.tools.ConsumerPerformance",
}


def kafka_flags(main: str) -> set[str]:
    """The long flags a Kafka tool's ``--help`` lists (jopt-simple's table or argparse4j's)."""
    proc = subprocess.run(
        ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(KAFKA_VERSION), main, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    text = proc.stdout + proc.stderr
    flags = set(re.findall(r"^\s*(--[a-z][a-z0-9.-]*)", text, re.M))
    flags |= set(re.findall(r"^\s*-\w, (--[a-z][a-z0-9.-]*)", text, re.M))
    assert len(flags) >= 4, f"{main} --help listed no flags:\n{text[:2000]}"
    return flags


def kafkalog_flags(command: str) -> set[str]:
    ctx = click.Context(cli)
    found: click.Command | None = cli
    for part in command.split():
        assert isinstance(found, click.Group)
        found = found.get_command(ctx, part)
        assert found is not None, command
    names = {opt for param in found.params for opt in param.opts + param.secondary_opts}
    return names | {"--help"}  # every command takes -h/--help


def listed_in_docs() -> dict[str, set[str]]:
    """docs/cli.md's table: command (or "every command") -> the flags it lists."""
    text = DOC.read_text()
    section = text[text.index("## Kafka's flags that kafkalog does not take") :]
    table: dict[str, set[str]] = {}
    for row in re.findall(r"^\| (.+?) \| (.+?) \| .+ \|$", section, re.M):
        command = re.sub(r"`|\(.*\)", "", row[0]).strip()
        table.setdefault(command, set()).update(re.findall(r"`(--[a-z][a-z0-9.-]*)`", row[1]))
    return table


@pytest.mark.parametrize("command", sorted(MIRRORED))
def test_every_kafka_flag_is_taken_or_listed_with_a_reason(command: str) -> None:
    table = listed_in_docs()
    listed = table.get(command, set()) | table["every command"]
    ours = kafkalog_flags(command)
    theirs = kafka_flags(MIRRORED[command])
    missing = sorted(theirs - ours - listed)
    assert not missing, f"kafkalog {command} neither takes nor lists (docs/cli.md): {missing}"
    stale = sorted((table.get(command, set()) & ours) - {"--command-config"})
    assert not stale, f"docs/cli.md lists flags kafkalog {command} takes now: {stale}"
    unknown = sorted(table.get(command, set()) - theirs)
    assert not unknown, f"docs/cli.md lists flags Kafka's tool does not have: {unknown}"
