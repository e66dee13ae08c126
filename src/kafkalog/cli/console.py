"""``produce`` and ``consume``: kafka-console-producer and kafka-console-consumer on files.

Why: the quickest way to put lines into a topic or read them back is the console tools Kafka
users know, with the same properties (``parse.key``, ``key.separator``, ``print.offset``, ...).
Keyed records go where a Java producer would put them (murmur2); keyless ones stick to one
partition per batch of lines, as the sticky partitioner does. Refuses: partial lines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import TextIO

import click

from kafkalog.cli.admin import existing_dirs, log_dirs_option
from kafkalog.cli.errors import user_errors
from kafkalog.errors import (
    InvalidArgumentError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.view import PartitionView, topic_views
from kafkalog.manager.log_manager import LogManager
from kafkalog.records import Record
from kafkalog.records.committed import committed_batches
from kafkalog.records.partitioner import partition_for_key

CHUNK = 1000


def parse_properties(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="--property")
        out[key.strip()] = value.encode().decode("unicode_escape")
    return out


def parse_line(line: str, props: dict[str, str]) -> Record:
    headers: list[tuple[str, bytes | None]] = []
    if props.get("parse.headers", "false") == "true":
        delimiter = props.get("headers.delimiter", "\t")
        head, sep, line = line.partition(delimiter)
        if not sep:
            raise InvalidArgumentError(f"no headers delimiter {delimiter!r} in {line!r}")
        for item in head.split(props.get("headers.separator", ",")):
            if item:
                k, _, v = item.partition(props.get("headers.key.separator", ":"))
                headers.append((k, None if v == props.get("null.marker") else v.encode()))
    key: bytes | None = None
    if props.get("parse.key", "false") == "true":
        separator = props.get("key.separator", "\t")
        k, sep, line = line.partition(separator)
        if not sep:
            raise InvalidArgumentError(f"no key separator {separator!r} in {k!r}")
        key = k.encode()
    value = None if line == props.get("null.marker") else line.encode()
    return Record(value, key, headers, timestamp=int(time.time() * 1000))


def _chunks(stream: TextIO) -> Iterator[list[str]]:
    chunk: list[str] = []
    for raw in stream:
        chunk.append(raw.rstrip("\n"))
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def partition_count(manager: LogManager, topic: str) -> int:
    count = manager.topics().get(topic)
    if count is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return count


@click.command()
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, default=None, help="Default: Kafka's partitioner.")
@click.option("--compression", default="none", show_default=True)
@click.option("--property", "props", multiple=True, help="parse.key=true, key.separator=...")
@user_errors
def produce(
    log_dirs: str, topic: str, partition: int | None, compression: str, props: tuple[str, ...]
) -> None:
    """Append stdin lines to a topic, like kafka-console-producer.

    \b
    Example:
      printf 'u1:hello\\nu2:world\\n' | kafkalog produce --log-dirs data --topic clicks \\
          --property parse.key=true --property key.separator=:
    """
    properties = parse_properties(props)
    with LogManager(existing_dirs(log_dirs)) as manager:
        count = partition_count(manager, topic)
        sticky = 0
        written = 0
        stdin: TextIO = sys.stdin
        for lines in _chunks(stdin):
            by_partition: dict[int, list[Record]] = {}
            for line in lines:
                record = parse_line(line, properties)
                if partition is not None:
                    target = partition
                elif record.key is not None:
                    target = partition_for_key(record.key, count)
                else:
                    target = sticky
                by_partition.setdefault(target, []).append(record)
            sticky = (sticky + 1) % count
            for p, records in sorted(by_partition.items()):
                manager.get_log(topic, p).append(records, compression=compression)
                written += len(records)
        click.echo(f"wrote {written} record(s) to {topic}", err=True)


@click.command()
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, default=None, help="Default: every partition.")
@click.option("--offset", default="earliest", show_default=True, help="earliest|latest|N")
@click.option("--from-timestamp", type=int, default=None, help="Start at this time (ms).")
@click.option("--max-messages", type=int, default=None)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
@click.option("--property", "props", multiple=True, help="print.key=true, print.offset=...")
@click.option("--follow", is_flag=True, help="Keep reading as data arrives.")
@user_errors
def consume(
    log_dirs: str,
    topic: str,
    partition: int | None,
    offset: str,
    from_timestamp: int | None,
    max_messages: int | None,
    isolation_level: str,
    props: tuple[str, ...],
    follow: bool,
) -> None:
    """Print a topic's records, like kafka-console-consumer.

    \b
    Example:
      kafkalog consume --log-dirs data --topic clicks --property print.key=true \\
          --max-messages 10
    """
    properties = parse_properties(props)
    committed = isolation_level == "read_committed"
    if offset not in ("earliest", "latest") and partition is None:
        raise click.UsageError("--offset N needs --partition")
    views = topic_views(existing_dirs(log_dirs), topic)
    if partition is not None:
        if partition not in views:
            raise UnknownTopicOrPartitionError(f"partition {partition} of {topic!r} not found")
        views = {partition: views[partition]}
    positions = {p: _start(v, offset, from_timestamp, committed) for p, v in views.items()}
    shown = 0
    while True:
        progressed = False
        for p, view in views.items():
            end = view.last_stable_offset() if committed else view.log_end_offset()
            if positions[p] >= end:
                continue
            for r, next_position in _records(view, positions[p], end, committed):
                if r is not None:
                    click.echo(_format(r, p, properties))
                    shown += 1
                positions[p] = next_position
                progressed = True
                if max_messages is not None and shown >= max_messages:
                    click.echo(f"Processed a total of {shown} messages", err=True)
                    return
        if not progressed:
            if not follow:
                break
            time.sleep(0.2)
    click.echo(f"Processed a total of {shown} messages", err=True)


def _start(view: PartitionView, offset: str, from_timestamp: int | None, committed: bool) -> int:
    if from_timestamp is not None:
        found = view.offset_for_timestamp(from_timestamp)
        return found if found is not None else view.log_end_offset()
    if offset == "earliest":
        return view.log_start_offset()
    if offset == "latest":
        return view.last_stable_offset() if committed else view.log_end_offset()
    try:
        position = int(offset)
    except ValueError:
        raise click.BadParameter(
            f"{offset!r} is not earliest, latest or an offset", param_hint="--offset"
        ) from None
    if position < 0:
        raise InvalidArgumentError(f"offset {position} is negative")
    start, end = view.log_start_offset(), view.log_end_offset()
    if not start <= position <= end:
        raise OffsetOutOfRangeError(
            f"offset {position} is out of range [{start}, {end}] of {view.directory.name}"
        )
    return position


def _records(
    view: PartitionView, start: int, end: int, committed: bool
) -> Iterator[tuple[Record | None, int]]:
    """(record or None for a skipped batch, the position after it) over ``[start, end)``."""
    batches = view.batches(start, end)
    if committed:
        aborted = view.aborted_transactions(start, end)
        kept = committed_batches(batches, aborted)
        # committed_batches drops batches; positions still advance past each kept one
        for batch in kept:
            for r in batch:
                if r.offset >= start:
                    yield r, r.offset + 1
            yield None, batch.next_offset
        yield None, end
        return
    for batch in batches:
        if not batch.is_control:
            for r in batch:
                if r.offset >= start:
                    yield r, r.offset + 1
        yield None, batch.next_offset


def _format(record: Record, partition: int, props: dict[str, str]) -> str:
    def on(name: str) -> bool:
        return props.get(name, "false") == "true"

    separator = props.get("key.separator", "\t")
    parts = []
    if on("print.timestamp"):
        parts.append(f"CreateTime:{record.timestamp}")
    if on("print.partition"):
        parts.append(f"Partition:{partition}")
    if on("print.offset"):
        parts.append(f"Offset:{record.offset}")
    if on("print.headers"):
        hs = ",".join(
            f"{k}:{'' if v is None else v.decode(errors='replace')}" for k, v in record.headers
        )
        parts.append(hs or "NO_HEADERS")
    if on("print.key"):
        parts.append("null" if record.key is None else record.key.decode(errors="replace"))
    parts.append("null" if record.value is None else record.value.decode(errors="replace"))
    return separator.join(parts)
