"""``produce`` and ``consume``: kafka-console-producer and kafka-console-consumer on files.

Why: the quickest way to put lines into a topic or read them back is the console tools Kafka
users know, with the same properties (``parse.key``, ``key.separator``, ``print.offset``, ...).
Keyed records go where a Java producer would put them (murmur2); keyless ones stick to one
partition per batch of lines, as the sticky partitioner does. Refuses: partial lines.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click

from kafkalog.cli.admin import existing_dirs, log_dirs_option
from kafkalog.cli.consumer_props import ConsumerSettings, formatter_properties
from kafkalog.cli.errors import user_errors
from kafkalog.cli.formatter import MessageFormatter
from kafkalog.cli.line_reader import LineMessageReader, lines
from kafkalog.cli.producer_props import CODECS
from kafkalog.cli.topics import topic_regex
from kafkalog.config_def import load_properties
from kafkalog.errors import (
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.view import PartitionView, discover_partitions
from kafkalog.manager.log_manager import LogManager
from kafkalog.records import Record
from kafkalog.records.committed import committed_batches
from kafkalog.records.partitioner import partition_for_key
from kafkalog.types import TimestampType, is_internal_topic

CHUNK = 1000
LINE_READERS = (
    "org.apache.kafka.tools.LineMessageReader",  # Kafka 3.5 on
    "kafka.tools.ConsoleProducer$LineMessageReader",  # before
)


def parse_properties(pairs: tuple[str, ...]) -> dict[str, str]:
    """Kafka's ``key=value`` arguments (a missing value is the empty string, as Kafka's
    ``parseKeyValueArgs``), with ``\\t``, ``\\n``, ``\\r``, ``\\\\`` and ``\\uXXXX`` unescaped
    for shells that cannot type a tab; any other character, ASCII or not, stays as it is."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key.strip()] = _ESCAPE.sub(_unescape, value)
    return out


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[tnr\\])")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code[1:], 16)) if code[0] == "u" else _ESCAPES[code]


def partition_count(manager: LogManager, topic: str, *, create: bool = False) -> int:
    """The topic's partitions. A missing one is created when ``create`` (a producer), as a
    broker with ``auto.create.topics.enable`` does for Kafka's console and perf producers:
    ``num.partitions`` partitions and the defaults, said on stderr."""
    count = manager.topics().get(topic)
    if count is None and create:
        count = len(manager.create_topic(topic))
        click.echo(f"created topic {topic} with {count} partition(s)", err=True)
    if count is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return count


@click.command()
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, default=None, help="Default: Kafka's partitioner.")
@click.option(
    "--compression-codec",
    "--compression",
    "compression",
    type=click.Choice(CODECS),
    is_flag=False,
    flag_value="gzip",
    default="none",
    show_default=True,
    help="As Kafka's: the flag alone means gzip.",
)
@click.option("--sync", is_flag=True, help="Append each line as its own batch, as Kafka's.")
@click.option(
    "--reader-property",
    "--property",
    "props",
    multiple=True,
    help="Kafka's LineMessageReader properties: parse.key, key.separator, parse.headers, "
    "headers.delimiter, headers.separator, headers.key.separator, null.marker, ignore.error "
    "(--property is Kafka 3's name).",
)
@click.option(
    "--reader-config",
    default=None,
    help="A properties file of reader properties; --reader-property wins.",
)
@click.option(
    "--line-reader",
    default=None,
    help="Kafka's LineMessageReader (either of its class names); no other.",
)
@click.option(
    "--producer-property",
    "--command-property",
    "producer_props",
    multiple=True,
    help="Producer configs, accepted and named in a warning: they tune a network client, and "
    "this command appends to the files (Kafka's tool sets compression.type from "
    "--compression-codec alone too).",
)
@click.option(
    "--producer.config",
    "--command-config",
    "producer_config",
    default=None,
    help="A properties file of producer configs; as --producer-property.",
)
@user_errors
def produce(
    log_dirs: str,
    topic: str,
    partition: int | None,
    compression: str,
    sync: bool,
    props: tuple[str, ...],
    reader_config: str | None,
    line_reader: str | None,
    producer_props: tuple[str, ...],
    producer_config: str | None,
) -> None:
    """Append stdin lines to a topic, like kafka-console-producer: lines end at \\n, \\r\\n
    or \\r and are read as UTF-8. A line that cannot be parsed stops the command; the lines
    before it are written, as Kafka's producer has sent them by then.

    \b
    Example:
      printf 'u1:hello\\nu2:world\\n' | kafkalog produce --log-dirs data --topic clicks \\
          --reader-property parse.key=true --reader-property key.separator=:
    """
    if line_reader is not None and line_reader not in LINE_READERS:
        raise click.UsageError(
            f"--line-reader {line_reader}: kafkalog reads lines with Kafka's LineMessageReader "
            f"only ({LINE_READERS[0]})"
        )
    reader_props = load_properties(reader_config) if reader_config is not None else {}
    reader = LineMessageReader.from_properties({**reader_props, **parse_properties(props)})
    client = {
        **(load_properties(producer_config) if producer_config is not None else {}),
        **parse_properties(producer_props),
    }
    if client:
        click.echo(
            "WARN kafkalog appends to local files, so these producer configs have no effect: "
            + ", ".join(sorted(client)),
            err=True,
        )
    chunk_size = 1 if sync else CHUNK
    with LogManager(existing_dirs(log_dirs)) as manager:
        count = partition_count(manager, topic, create=True)
        if partition is not None and not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of {topic!r} does not exist (it has {count})"
            )
        sticky = 0
        by_partition: dict[int, list[Record]] = {}

        def flush() -> None:
            nonlocal sticky
            for p, records in sorted(by_partition.items()):
                manager.get_log(topic, p).append(records, compression=compression)
            by_partition.clear()
            sticky = (sticky + 1) % count

        try:
            for number, line in enumerate(lines(sys.stdin.buffer), start=1):
                record = reader.record(line, number, int(time.time() * 1000))
                if partition is not None:
                    target = partition
                elif record.key is not None:
                    target = partition_for_key(record.key, count)
                else:
                    target = sticky
                by_partition.setdefault(target, []).append(record)
                if number % chunk_size == 0:
                    flush()
        finally:
            flush()  # and nothing printed: Kafka's console producer says nothing either


@click.command()
@log_dirs_option
@click.option("--topic", default=None, help="The topic (or --include).")
@click.option("--include", default=None, help="A regular expression: every topic it matches whole.")
@click.option("--partition", type=int, default=None, help="Default: every partition.")
@click.option(
    "--offset",
    default=None,
    help="earliest, latest or an offset; needs --partition. Default: latest (Kafka's).",
)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option(
    "--from-timestamp",
    type=int,
    default=None,
    help="kafkalog's own: start at the first record at or after this time (ms).",
)
@click.option(
    "--max-messages",
    type=int,
    default=None,
    help="Exit after this many messages; as Kafka's, 0 or less reads none, -1 or unset reads on.",
)
@click.option(
    "--timeout-ms",
    type=int,
    default=None,
    help="Exit when no message arrives for this long. Default: keep waiting (Kafka's).",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default=None,
    help="Default: the consumer configs' isolation.level, else read_uncommitted.",
)
@click.option(
    "--formatter-property",
    "--property",
    "props",
    multiple=True,
    help="print.key=true, print.timestamp=true, key.separator=... (Kafka's formatter).",
)
@click.option(
    "--formatter-config",
    default=None,
    help="A properties file of formatter properties; --formatter-property wins.",
)
@click.option(
    "--formatter",
    "formatter_class",
    default=None,
    help="Kafka's DefaultMessageFormatter (either of its class names); no other.",
)
@click.option(
    "--consumer-property",
    "--command-property",
    "consumer_props",
    multiple=True,
    help="Consumer configs: group.id, isolation.level and auto.offset.reset count; the "
    "others, network settings mostly, are named in a warning.",
)
@click.option(
    "--consumer.config",
    "--command-config",
    "consumer_config",
    default=None,
    help="A properties file of consumer configs; --consumer-property wins.",
)
@click.option(
    "--group",
    default=None,
    help="Resume from the group's committed offsets in __consumer_offsets and commit at exit.",
)
@click.option("--follow", is_flag=True, hidden=True)  # kafkalog's old flag: waiting is the default
@user_errors
def consume(
    log_dirs: str,
    topic: str | None,
    include: str | None,
    partition: int | None,
    offset: str | None,
    from_beginning: bool,
    from_timestamp: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    isolation_level: str | None,
    props: tuple[str, ...],
    formatter_config: str | None,
    formatter_class: str | None,
    consumer_props: tuple[str, ...],
    consumer_config: str | None,
    group: str | None,
    follow: bool,
) -> None:
    """Print a topic's records, like kafka-console-consumer: from the end of each partition
    (--from-beginning or --offset to start elsewhere), waiting for more until --max-messages
    or --timeout-ms. Reads the files and takes no lock, so it works beside a writer; with
    --group it resumes from the group's committed offsets and commits at exit, which needs
    the log directory's lock.

    \b
    Example:
      kafkalog consume --log-dirs data --topic clicks --from-beginning \\
          --formatter-property print.key=true --timeout-ms 1000
    """
    formatter = MessageFormatter.from_properties(
        formatter_properties(formatter_class, formatter_config, parse_properties(props))
    )
    if (topic is None) == (include is None):
        raise click.UsageError("Exactly one of --include/--topic is required. ")
    if partition is not None and topic is None:
        raise click.UsageError("The topic is required when partition is specified.")
    settings = ConsumerSettings.resolve(
        consumer_config, parse_properties(consumer_props), group, isolation_level, from_beginning
    )
    for warning in settings.warnings:
        click.echo(warning, err=True)
    group = settings.group
    if timeout_ms is not None and timeout_ms < 0:
        timeout_ms = None  # Kafka's: a negative timeout waits forever
    committed = settings.isolation_level == "read_committed"
    if offset is not None and partition is None:
        raise click.UsageError("The partition is required when offset is specified.")
    if offset is not None and from_beginning:
        raise click.UsageError("Options from-beginning and offset cannot be specified together.")
    if group is not None and partition is not None:
        raise click.UsageError("Options group and partition cannot be specified together.")
    dirs = existing_dirs(log_dirs)
    views = _views(dirs, topic, include)
    if partition is not None:
        assert topic is not None  # checked above: a partition needs --topic
        if (topic, partition) not in views:
            raise UnknownTopicOrPartitionError(f"partition {partition} of {topic!r} not found")
        views = {(topic, partition): views[(topic, partition)]}
    start = offset if offset is not None else settings.auto_offset_reset
    positions = {tp: _start(v, start, from_timestamp, committed) for tp, v in views.items()}
    if group is not None:
        # imported when wanted: it loads kafkalog.server (the protocol codecs), a quarter second
        from kafkalog.cli.consume_group import check_can_commit, commit, committed_offsets  # noqa: PLC0415

        check_can_commit(dirs)
        for tp, resume in committed_offsets(dirs, group).items():
            if tp in views:  # else auto.offset.reset: latest, or earliest
                positions[tp] = max(resume, views[tp].log_start_offset())
        begun = dict(positions)
    if max_messages == -1:  # Kafka's "not set"
        max_messages = None
    try:
        shown = (
            0
            if max_messages is not None and max_messages <= 0
            else _consume(views, positions, formatter, committed, max_messages, timeout_ms)
        )
    finally:
        if group is not None:
            for name in sorted({t for t, _ in views}):
                moved = {
                    p: o for (t, p), o in positions.items() if t == name and o != begun[(t, p)]
                }
                commit(dirs, group, name, moved)
    click.echo(f"Processed a total of {shown} messages", err=True)


def _consume(
    views: dict[tuple[str, int], PartitionView],
    positions: dict[tuple[str, int], int],
    formatter: MessageFormatter,
    committed: bool,
    max_messages: int | None,
    timeout_ms: int | None,
) -> int:
    """Print records from ``positions`` (moved as they are printed) until ``max_messages``
    or ``timeout_ms`` without one; returns how many were printed."""
    out = sys.stdout.buffer
    shown = 0
    last_message = time.monotonic()
    while True:
        progressed = False
        for p, view in views.items():
            end = view.last_stable_offset() if committed else view.log_end_offset()
            if positions[p] >= end:
                continue
            for r, timestamp_type, next_position in _records(view, positions[p], end, committed):
                if r is not None:
                    out.write(formatter.format(r, p[1], timestamp_type))
                    shown += 1
                positions[p] = next_position
                progressed = True
                if max_messages is not None and shown >= max_messages:
                    out.flush()
                    return shown
        out.flush()
        if progressed:
            last_message = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= timeout_ms:
            click.echo(
                "ERROR Error processing message, terminating consumer process: "
                f"TimeoutException (no message for {timeout_ms} ms)",
                err=True,
            )
            return shown
        else:
            time.sleep(0.1 if timeout_ms is None else min(0.1, timeout_ms / 1000))


def _views(
    dirs: list[Path], topic: str | None, include: str | None
) -> dict[tuple[str, int], PartitionView]:
    """The partitions to read: the topic's, or those of every topic ``include`` matches whole
    (internal topics left out, as a consumer's pattern subscription leaves them)."""
    found = discover_partitions(dirs)
    if include is not None:
        regex = topic_regex(include, "--include")
        chosen = [
            tp for tp in found if regex.fullmatch(tp.topic) and not is_internal_topic(tp.topic)
        ]
    else:
        chosen = [tp for tp in found if tp.topic == topic]
        if not chosen:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return {(tp.topic, tp.partition): PartitionView(found[tp]) for tp in sorted(chosen)}


def _start(view: PartitionView, offset: str, from_timestamp: int | None, committed: bool) -> int:
    if from_timestamp is not None:
        found = view.offset_for_timestamp(from_timestamp)
        return found if found is not None else view.log_end_offset()
    if offset.lower() == "earliest":
        return view.log_start_offset()
    if offset.lower() == "latest":
        return view.last_stable_offset() if committed else view.log_end_offset()
    try:
        position = int(offset)
    except ValueError:
        position = -1
    if position < 0:
        raise click.BadParameter(
            f"The provided offset value '{offset}' is incorrect. Valid values are "
            "'earliest', 'latest', or a non-negative long.",
            param_hint="--offset",
        )
    start, end = view.log_start_offset(), view.log_end_offset()
    if not start <= position <= end:
        raise OffsetOutOfRangeError(
            f"offset {position} is out of range [{start}, {end}] of {view.directory.name}"
        )
    return position


def _records(
    view: PartitionView, start: int, end: int, committed: bool
) -> Iterator[tuple[Record | None, TimestampType, int]]:
    """(record or None for a skipped batch, its batch's timestamp type, the position after it)
    over ``[start, end)``."""
    batches = view.batches(start, end)
    if committed:
        aborted = view.aborted_transactions(start, end)
        kept = committed_batches(batches, aborted)
        # committed_batches drops batches; positions still advance past each kept one
        for batch in kept:
            for r in batch:
                if r.offset >= start:
                    yield r, batch.timestamp_type, r.offset + 1
            yield None, batch.timestamp_type, batch.next_offset
        yield None, TimestampType.NO_TIMESTAMP_TYPE, end
        return
    for batch in batches:
        if not batch.is_control:
            for r in batch:
                if r.offset >= start:
                    yield r, batch.timestamp_type, r.offset + 1
        yield None, batch.timestamp_type, batch.next_offset
