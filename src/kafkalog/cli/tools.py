"""``configs``, ``get-offsets``, ``delete-records`` and ``log-dirs``: Kafka's admin tools
(kafka-configs, kafka-get-offsets, kafka-delete-records, kafka-log-dirs) over log directories.

Why: the same flags and the same output a Kafka user's scripts already parse -- a
``topic:partition:offset`` line per partition, the delete-records JSON file and its
``low_watermark`` lines, kafka-log-dirs' JSON -- acting on the files instead of a broker.

Refuses: entity types other than topics (broker configs belong in ``server.properties``), and
a delete-records offset past the high watermark (Kafka's OFFSET_OUT_OF_RANGE, per partition).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import click

from kafkalog.cli.admin import existing_dirs, log_dirs_option
from kafkalog.cli.errors import user_errors
from kafkalog.cli.topics import node_id, topic_regex
from kafkalog.config_def import load_properties
from kafkalog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    KafkaLogError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.config import REMOVED_IN_KAFKA_4, TOPIC_CONFIG
from kafkalog.manager.config_ops import AlterConfigOp, AlterConfigOpType
from kafkalog.manager.config_sources import (
    BROKER_TOPIC_DEFAULTS,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    SOURCE_NAMES,
    Synonym,
    broker_config_synonyms,
    config_source,
    topic_config_synonyms,
)
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.reader import LogDirsReader
from kafkalog.types import is_internal_topic

# ListOffsets' special timestamps, by GetOffsetShell's names
TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}
_PAIR = re.compile(r"([^=,]+)=(\[[^\]]*\]|[^,]*)")


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' ``--add-config``: ``k1=v1,k2=[v2,v3]``; brackets group a list value."""
    out: dict[str, str] = {}
    rest = text.strip()
    while rest:
        match = _PAIR.match(rest)
        if match is None:
            raise InvalidConfigError("--add-config", f"{text!r} is not k1=v1,k2=[v2,v3]")
        key, value = match.group(1).strip(), match.group(2).strip()
        out[key] = value[1:-1] if value.startswith("[") else value
        rest = rest[match.end() :].lstrip(",").strip()
    return out


@click.command()
@log_dirs_option
@click.option(
    "--entity-type", type=click.Choice(["topics", "brokers"]), default=None, help="Default: topics."
)
@click.option("--entity-name", help="The topic, or the broker id.")
@click.option("--entity-default", is_flag=True, help="Every broker's run-time defaults.")
@click.option("--topic", "topic_name", default=None, help="--entity-type topics --entity-name.")
@click.option("--broker", "broker_id", default=None, help="--entity-type brokers --entity-name.")
@click.option("--broker-defaults", is_flag=True, help="--entity-type brokers --entity-default.")
@click.option("--describe", "action", flag_value="describe", help="Show the configs.")
@click.option("--alter", "action", flag_value="alter", help="Change a topic's.")
@click.option("--add-config", help="k1=v1,k2=[v2,v3]: set these overrides.")
@click.option("--add-config-file", default=None, help="A properties file of overrides to set.")
@click.option("--delete-config", help="k1,k2: remove these overrides (back to the default).")
@click.option("--all", "show_all", is_flag=True, help="Describe every key, not only overrides.")
@user_errors
def configs(
    log_dirs: str,
    entity_type: str | None,
    entity_name: str | None,
    entity_default: bool,
    topic_name: str | None,
    broker_id: str | None,
    broker_defaults: bool,
    action: str | None,
    add_config: str | None,
    add_config_file: str | None,
    delete_config: str | None,
    show_all: bool,
) -> None:
    """Describe or alter a topic's configs, or describe a broker's, like kafka-configs.

    A broker is described by the keys that set topic defaults: from Kafka's defaults and the
    run-time ones kafkalog serve keeps, or a Kafka broker in its metadata log (read only here).

    \b
    Examples:
      kafkalog configs --log-dirs data --entity-name clicks --describe
      kafkalog configs --log-dirs data --entity-name clicks --alter \\
          --add-config retention.ms=3600000,cleanup.policy=[compact,delete]
      kafkalog configs --log-dirs data --entity-name clicks --alter --delete-config retention.ms
      kafkalog configs --log-dirs data --entity-type brokers --entity-default --describe
    """
    if action is None:
        raise click.UsageError("one of --describe, --alter is needed")
    shorthands = [(t, n, d) for t, n, d, given in (
        ("topics", topic_name, False, topic_name is not None),
        ("brokers", broker_id, False, broker_id is not None),
        ("brokers", None, True, broker_defaults),
    ) if given]  # fmt: skip
    if len(shorthands) > 1 or (shorthands and (entity_type or entity_name or entity_default)):
        raise click.UsageError(
            "name the entity once: --entity-type with --entity-name/--entity-default, or one "
            "of --topic, --broker, --broker-defaults"
        )
    if shorthands:
        entity_type, entity_name, entity_default = shorthands[0]
    entity_type = entity_type or "topics"
    if add_config_file is not None and add_config is not None:
        raise click.UsageError("only one of --add-config, --add-config-file")
    if entity_type == "topics" and (entity_name is None or entity_default):
        raise click.UsageError("topics take --entity-name (the topic), not --entity-default")
    if entity_type == "brokers" and (entity_name is not None) == entity_default:
        raise click.UsageError("brokers take one of --entity-name (a broker id), --entity-default")
    if entity_type == "brokers" and action == "alter":
        raise click.UsageError(
            "broker configs are read-only here: server.properties and a Kafka broker's "
            "metadata log hold them"
        )
    if action == "alter" and not (add_config or add_config_file or delete_config):
        raise click.UsageError("--alter needs --add-config, --add-config-file or --delete-config")
    dirs = existing_dirs(log_dirs)
    if action == "describe":  # read-only: no lock, so beside a writer too, and no byte written
        reader = LogDirsReader(dirs)
        if entity_type == "brokers":
            broker = None if entity_default else entity_name
            _describe_broker(reader.dynamic_broker_configs, broker, node_id(dirs), show_all)
            return
        assert entity_name is not None
        reader.view(entity_name, 0)  # UnknownTopicOrPartition for a missing topic
        _describe_topic(reader, entity_name, show_all)
        return
    with LogManager(dirs) as manager:
        assert entity_name is not None
        manager.get_log(entity_name, 0)  # UnknownTopicOrPartition for a missing topic
        if action == "alter":
            adds = (
                load_properties(add_config_file)
                if add_config_file is not None
                else parse_add_config(add_config or "")
            )
            ops = [AlterConfigOp(k, AlterConfigOpType.SET, v) for k, v in adds.items()]
            ops += [
                AlterConfigOp(k.strip(), AlterConfigOpType.DELETE)
                for k in (delete_config or "").split(",")
                if k.strip()
            ]
            manager.alter_topic_config(entity_name, ops)
            click.echo(f"Completed updating config for topic {entity_name}.")


def _describe_topic(reader: LogDirsReader, topic: str, show_all: bool) -> None:
    overrides = reader.topic_overrides(topic)
    values = {**reader.topic_config(topic).to_properties(), **overrides}
    keys = sorted(
        k
        for k in TOPIC_CONFIG.keys
        if not k.startswith("internal.") and (k not in REMOVED_IN_KAFKA_4 or k in overrides)
    )
    click.echo(f"{'All' if show_all else 'Dynamic'} configs for topic {topic} are:")
    for k in keys if show_all else sorted(overrides):
        layers = topic_config_synonyms(k, overrides, reader.dynamic_broker_configs, {})
        _print_entry(k, values[k], layers)


def _describe_broker(
    dynamic: tuple[dict[str, str], dict[str, str]], broker: str | None, node: int, show_all: bool
) -> None:
    """ConfigCommand's lines for broker ``broker`` (None: every broker's defaults): without
    --all, only the keys set at run time for it."""
    if broker is not None and broker != str(node):
        if not broker.isdigit():
            raise InvalidArgumentError(
                f"The entity name for brokers must be a valid integer broker id, found: {broker}"
            )
        raise UnknownTopicOrPartitionError(
            f"the log directories are broker {node}'s, not {broker}'s"
        )
    if broker is None:
        click.echo("Default configs for brokers in the cluster are:")
        wanted = {DYNAMIC_DEFAULT_BROKER_CONFIG}
    else:
        click.echo(f"{'All' if show_all else 'Dynamic'} configs for broker {broker} are:")
        wanted = set(SOURCE_NAMES) if show_all else {DYNAMIC_BROKER_CONFIG}
    for key in BROKER_TOPIC_DEFAULTS:
        layers = broker_config_synonyms(key, dynamic, {})
        if config_source(layers) in wanted:
            _print_entry(key, layers[0][1] if layers else None, layers)


def _print_entry(key: str, value: str | None, layers: list[Synonym]) -> None:
    synonyms = ", ".join(f"{SOURCE_NAMES[s]}:{n}={v}" for n, v, s in layers)
    click.echo(
        f"  {key}={'null' if value is None else value} sensitive=false synonyms={{{synonyms}}}"
    )


@click.command("get-offsets")
@log_dirs_option
@click.option("--topic", help="A regular expression; every topic without it.")
@click.option("--partitions", help="Comma-separated partition numbers; all without it.")
@click.option("--topic-partitions", default=None,
              help="Comma-separated TOPIC-REGEX:PARTITIONS rules, PARTITIONS as N, N-M (M "
              "excluded), N- or -M; instead of --topic and --partitions.")  # fmt: skip
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics.")
@click.option("--time", "time_", default="latest", show_default=True,
              help="latest (-1), earliest (-2), max-timestamp (-3) or ms.")  # fmt: skip
@user_errors
def get_offsets(
    log_dirs: str,
    topic: str | None,
    partitions: str | None,
    topic_partitions: str | None,
    exclude_internal_topics: bool,
    time_: str,
) -> None:
    """Print topic:partition:offset for each partition, like kafka-get-offsets: the offset of
    the first record at or after --time, or the special offsets."""
    if topic_partitions is not None and (topic is not None or partitions is not None):
        raise click.UsageError("--topic-partitions cannot be used with --topic or --partitions")
    try:
        when = TIMES[time_] if time_ in TIMES else int(time_)
    except ValueError:
        raise InvalidArgumentError(
            f"--time {time_!r}: latest, earliest, max-timestamp or ms"
        ) from None
    if topic_partitions is not None:
        rules = [_partition_rule(spec) for spec in topic_partitions.split(",")]
    else:
        rules = [_topic_and_partitions_rule(topic, partitions)]
    reader = LogDirsReader(existing_dirs(log_dirs))  # read-only: beside a writer, no byte written
    topics = reader.topics()
    chosen = [
        (name, p)
        for name in sorted(topics)
        if not (exclude_internal_topics and is_internal_topic(name))
        for p in range(topics[name])
        if any(regex.fullmatch(name) and allows(p) for regex, allows in rules)
    ]
    if not chosen:
        raise UnknownTopicOrPartitionError(
            "Could not match any topic-partitions with the specified filters"
        )
    for name, p in chosen:
        found = reader.view(name, p).list_offset(when)
        if found is not None:  # GetOffsetShell leaves out a partition with no answer
            click.echo(f"{name}:{p}:{found}")


# GetOffsetShell's TOPIC_PARTITION_PATTERN: a topic regex, then :N, :N-M, :N- or :-M
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
PartitionRule = tuple[re.Pattern[str], Callable[[int], bool]]


def _partition_rule(spec: str) -> PartitionRule:
    """One --topic-partitions rule, read as Kafka's GetOffsetShell.parseRuleSpec reads it."""
    found = _RULE.fullmatch(spec)
    if found is None:
        raise InvalidArgumentError(f"Invalid rule specification: {spec}")
    topic, one, low, high = (g or None for g in found.groups())
    regex = topic_regex(topic or ".*", "--topic-partitions")
    if one is not None:
        return regex, lambda p: p == int(one)
    lo, hi = int(low or 0), int(high) if high else 2**31 - 1
    return regex, lambda p: lo <= p < hi


def _topic_and_partitions_rule(topic: str | None, partitions: str | None) -> PartitionRule:
    wanted: set[int] = set()
    if partitions:
        try:
            wanted = {int(p) for p in partitions.split(",") if p.strip()}
        except ValueError:
            raise InvalidArgumentError(
                f"--partitions {partitions!r}: comma-separated numbers"
            ) from None
    return topic_regex(topic or ".*"), lambda p: not wanted or p in wanted


@click.command("delete-records")
@log_dirs_option
@click.option("--offset-json-file", required=True, type=click.Path(dir_okay=False),
              help='{"partitions":[{"topic":"t","partition":0,"offset":4}]}')  # fmt: skip
@user_errors
def delete_records(log_dirs: str, offset_json_file: str) -> None:
    """Move each listed partition's log start offset up (offset -1: the high watermark), like
    kafka-delete-records; the segments below it go with the next retention pass."""
    try:
        spec = json.loads(Path(offset_json_file).read_text(encoding="utf-8"))
        targets = [(e["topic"], int(e["partition"]), int(e["offset"])) for e in spec["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InvalidArgumentError(f"--offset-json-file {offset_json_file}: {err}") from err
    click.echo("Executing records delete operation")
    results = []
    with LogManager(existing_dirs(log_dirs)) as manager:
        for topic, partition, offset in targets:
            try:
                log = manager.get_log(topic, partition)
                log.maybe_increment_log_start_offset(log.high_watermark if offset == -1 else offset)
                results.append(
                    f"partition: {topic}-{partition}\tlow_watermark: {log.log_start_offset}"
                )
            except KafkaLogError as err:
                results.append(f"partition: {topic}-{partition}\terror: {err}")
    click.echo("Records delete operation completed:")
    for line in results:
        click.echo(line)


@click.command("log-dirs")
@log_dirs_option
@click.option("--describe", is_flag=True, required=True, help="Describe the log directories.")
@click.option("--topic-list", help="Comma-separated topics; all without it.")
@user_errors
def log_dirs(log_dirs: str, describe: bool, topic_list: str | None) -> None:
    """Each log directory's partitions and sizes as kafka-log-dirs' JSON."""
    dirs = existing_dirs(log_dirs)
    topics = None if not topic_list else {t for t in topic_list.split(",") if t}
    reader = LogDirsReader(dirs)  # read-only: beside a writer, and no byte written
    described = []
    for d in reader.log_dirs:
        parts = [
            {"partition": f"{tp.topic}-{tp.partition}", "size": view.size_in_bytes(),
             "offsetLag": 0, "isFuture": False}
            for tp, view in reader.views().items()
            if (topics is None or tp.topic in topics) and reader.log_dir_of(tp) == d
        ]  # fmt: skip
        described.append({"partitions": parts, "error": None, "logDir": str(d)})
    node = node_id(dirs)
    click.echo("Querying brokers for log directories information")
    click.echo(f"Received log directory information from brokers {node}")
    document = {"brokers": [{"broker": node, "logDirs": described}], "version": 1}
    click.echo(json.dumps(document, separators=(",", ":")))
