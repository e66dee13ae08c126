"""``kafkalog topics``: kafka-topics over log directories.

Why: a Kafka user reaches for kafka-topics' flags and reads its output; here they act on the
files directly (no broker). ``--topic`` is a regular expression for everything but
``--create``, as in Kafka; ``--if-exists``/``--if-not-exists`` turn the missing/existing topic
into no error; the describe lines carry Kafka's fields for a single node (Leader, Replicas and
Isr are that node) followed by kafkalog's own (offsets, size, segments, log dir). ``--list``
and ``--describe`` read the files without the directory lock, so they work beside a writer.

Refuses: a replication factor other than 1 (one copy of each partition is all there is), and
``--alter --config`` (Kafka 3.0 removed it; ``kafkalog configs --alter`` changes configs).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from kafkalog.cli.admin import existing_dirs, log_dirs_option, parse_configs
from kafkalog.cli.errors import user_errors
from kafkalog.errors import InvalidConfigError, TopicExistsError, UnknownTopicOrPartitionError
from kafkalog.log.view import PartitionView, discover_partitions
from kafkalog.manager.log_dir import topic_configs
from kafkalog.manager.log_manager import LogManager
from kafkalog.storage.meta_properties import node_id as meta_node_id
from kafkalog.storage.partition_metadata import read_partition_metadata
from kafkalog.types import is_internal_topic

ACTIONS = ("create", "list", "describe", "alter", "delete")


def node_id(log_dirs: list[Path]) -> int:
    """The broker id a directory's ``meta.properties`` names (Kafka writes it), else 1:
    ``kafkalog serve``'s default ``node.id``."""
    found = meta_node_id(log_dirs)
    return 1 if found is None else found


def topic_regex(pattern: str, flag: str = "--topic") -> re.Pattern[str]:
    """A topic pattern as Kafka's tools take it; a bad one is a one-line error naming ``flag``."""
    try:
        return re.compile(pattern)
    except re.error as err:
        raise InvalidConfigError(flag, f"{pattern!r} is not a regular expression: {err}") from None


def matching(names: list[str], pattern: str | None, *, if_exists: bool) -> list[str]:
    """Topics whose name the regular expression matches whole (all without ``--topic``)."""
    if pattern is None:
        return names
    regex = topic_regex(pattern)
    found = [n for n in names if regex.fullmatch(n)]
    if not found and not if_exists:
        raise UnknownTopicOrPartitionError(f"Topic '{pattern}' does not exist as expected")
    return found


@click.command()
@log_dirs_option
@click.option("--create", "action", flag_value="create", help="Create --topic.")
@click.option("--list", "action", flag_value="list", help="List topics.")
@click.option("--describe", "action", flag_value="describe", help="Describe topics.")
@click.option("--alter", "action", flag_value="alter", help="Add partitions (--partitions).")
@click.option("--delete", "action", flag_value="delete", help="Delete topics.")
@click.option("--topic", help="The topic to create; a regular expression for the others.")
@click.option("--partitions", type=int, help="Partitions to create with, or to grow to.")
@click.option("--replication-factor", type=int, help="Accepted when 1: one copy is kept.")
@click.option("--config", "configs", multiple=True, help="A topic override, key=value (create).")
@click.option("--if-exists", is_flag=True, help="No error when the topic is missing.")
@click.option("--if-not-exists", is_flag=True, help="No error when the topic exists (create).")
@click.option(
    "--exclude-internal", is_flag=True, help="Leave out internal topics (list, describe)."
)
@click.option("--topic-id", default=None, help="Describe the topic with this id.")
@click.option("--under-replicated-partitions", "report", flag_value="under-replicated",
              help="Describe only those (none: one replica, always in sync).")  # fmt: skip
@click.option("--unavailable-partitions", "report", flag_value="unavailable",
              help="Describe only partitions without a leader (none, once loaded).")  # fmt: skip
@click.option("--under-min-isr-partitions", "report", flag_value="under-min-isr",
              help="Describe only those whose ISR (1) is below min.insync.replicas.")  # fmt: skip
@click.option("--at-min-isr-partitions", "report", flag_value="at-min-isr",
              help="Describe only those whose ISR (1) equals min.insync.replicas.")  # fmt: skip
@click.option("--topics-with-overrides", "with_overrides", is_flag=True,
              help="Describe only topics with overrides: topic lines, no partitions.")  # fmt: skip
@user_errors
def topics(
    log_dirs: str,
    action: str | None,
    topic: str | None,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_exists: bool,
    if_not_exists: bool,
    exclude_internal: bool,
    topic_id: str | None,
    report: str | None,
    with_overrides: bool,
) -> None:
    """Create, list, describe, alter and delete topics, like kafka-topics.

    \b
    Examples:
      kafkalog topics --log-dirs data --create --topic clicks --partitions 4 \\
          --config cleanup.policy=compact
      kafkalog topics --log-dirs data --alter --topic clicks --partitions 6
      kafkalog topics --log-dirs data --describe --topic 'click.*'
    """
    if action is None:
        raise click.UsageError(f"one of {', '.join('--' + a for a in ACTIONS)} is needed")
    if action in ("create", "alter", "delete") and not topic:
        raise click.UsageError(f"--{action} needs --topic")
    if replication_factor is not None and action != "create":
        raise click.UsageError("--replication-factor goes with --create only")
    if replication_factor not in (None, 1):
        raise InvalidConfigError(
            "--replication-factor",
            f"kafkalog keeps one copy of each partition, not {replication_factor}",
        )
    if configs and action != "create":
        raise click.UsageError("--config goes with --create only; use kafkalog configs --alter")
    if action == "alter" and partitions is None:
        raise click.UsageError("--alter needs --partitions")
    dirs = [Path(d) for d in log_dirs.split(",") if d]
    if action != "create":
        existing_dirs(log_dirs)
    if (report or topic_id or with_overrides) and action != "describe":
        raise click.UsageError(
            "--topic-id, --topics-with-overrides and the partition reports go with --describe only"
        )
    if topic_id and topic:
        raise click.UsageError("--topic and --topic-id cannot be given together")
    if action in ("list", "describe"):  # read-only: no lock, so beside a writer too
        by_topic = _partitions(dirs)
        overrides = topic_configs(dirs) if action == "describe" else {}
        names = [n for n in sorted(by_topic) if not (exclude_internal and is_internal_topic(n))]
        if topic_id is not None:
            names = [n for n in names if _topic_id(by_topic[n]) == topic_id]
            if not names and not if_exists:
                raise UnknownTopicOrPartitionError(f"Topic '{topic_id}' does not exist as expected")
        for name in matching(names, topic, if_exists=if_exists):
            if action == "list":
                click.echo(name)
            else:
                # TopicCommand's DescribeOptions: a report prints partition lines alone;
                # --topics-with-overrides the topic line of a topic with an override alone
                topic_overrides = overrides.get(name, {})
                if report is None and (topic_overrides or not with_overrides):
                    _describe_topic(topic_overrides, name, by_topic[name])
                if not with_overrides and (report is None or _reported(report, topic_overrides)):
                    _describe_partitions(name, by_topic[name], node_id(dirs))
        return
    with LogManager(dirs) as manager:
        if action == "create":
            assert topic is not None
            try:
                manager.create_topic(topic, partitions, parse_configs(configs))
            except TopicExistsError:
                if not if_not_exists:
                    raise
                return
            click.echo(f"Created topic {topic}.")
            return
        for name in matching(sorted(manager.topics()), topic, if_exists=if_exists):
            if action == "alter":
                assert partitions is not None
                manager.create_partitions(name, partitions)
            else:
                manager.delete_topic(name)
                click.echo(f"Topic {name} is marked for deletion.")


def _partitions(dirs: list[Path]) -> dict[str, dict[int, Path]]:
    out: dict[str, dict[int, Path]] = {}
    for tp, path in discover_partitions(dirs).items():
        out.setdefault(tp.topic, {})[tp.partition] = path
    return out


def _topic_id(partitions: dict[int, Path]) -> str:
    meta = read_partition_metadata(partitions[min(partitions)])
    return str(meta.topic_id) if meta else "NONE"


def _reported(report: str, overrides: dict[str, str]) -> bool:
    """Whether kafka-topics' partition report ``report`` lists this topic's partitions: each
    has one replica, its leader, always in sync (Kafka's PartitionDescription rules), against
    the topic's min.insync.replicas (its override, else Kafka's default 1: a broker's own
    setting is in its server.properties, not in the log directories)."""
    if report in ("under-replicated", "unavailable"):
        return False
    min_isr = int(overrides.get("min.insync.replicas", "1"))
    return min_isr > 1 if report == "under-min-isr" else min_isr == 1


def _describe_topic(overrides: dict[str, str], topic: str, partitions: dict[int, Path]) -> None:
    """kafka-topics' topic line from the files alone: another process may be writing."""
    configs = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    click.echo(
        f"Topic: {topic}\tTopicId: {_topic_id(partitions)}\t"
        f"PartitionCount: {len(partitions)}\tReplicationFactor: 1\tConfigs: {configs}"
    )


def _describe_partitions(topic: str, partitions: dict[int, Path], node: int) -> None:
    """kafka-topics' partition lines, with kafkalog's offsets and sizes after them."""
    for p, path in sorted(partitions.items()):
        view = PartitionView(path, frozen=True)  # one listing for the line's four answers
        segments = view.segments()
        click.echo(
            f"\tTopic: {topic}\tPartition: {p}\tLeader: {node}\tReplicas: {node}\tIsr: {node}\t"
            "Elr: \tLastKnownElr: \t"  # Kafka 4: no eligible leader replicas on one node
            f"LogStartOffset: {view.log_start_offset()}\tLogEndOffset: {view.log_end_offset()}\t"
            f"Size: {sum(s.size for s in segments)}\tSegments: {len(segments)}\t"
            f"LogDir: {path.parent}"
        )
