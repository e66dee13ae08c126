"""``verify``, ``recover``, ``retention`` and ``compact``: managing log directories.

Why: a read-only integrity check that names the segment,
position and offset of any damage, an explicit recovery that says what it truncated or rebuilt,
and the background tasks run once on demand, under the topic defaults of the broker's own
``server.properties`` when given (``--config``). ``verify`` never opens a Log (opening
recovers, and a check must not repair). Refuses: editing data by hand.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from kafkalog.cli.dump_index import dump_offset_index, dump_time_index
from kafkalog.cli.dump_log import DumpOptions, DumpReport
from kafkalog.cli.errors import EXIT_PROBLEMS_FOUND, user_errors
from kafkalog.cli.progress import progress
from kafkalog.errors import (
    CorruptCheckpointError,
    CorruptRecordError,
    KafkaLogError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.log import Log
from kafkalog.log.view import SegmentFile, scan_segment
from kafkalog.manager.log_dir import topic_configs
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.server_config import ServerConfig
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from kafkalog.storage.dir_lock import held_by_writer
from kafkalog.storage.file_records import FileRecords
from kafkalog.storage.meta_properties import read_meta_properties


def log_dirs_option(fn_: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--log-dirs", required=True, help="Comma-separated log directories (Kafka's log.dirs)."
    )(fn_)


def existing_dirs(log_dirs: str) -> list[Path]:
    dirs = [Path(d) for d in log_dirs.split(",") if d]
    for d in dirs:
        if not d.is_dir():
            raise UnknownTopicOrPartitionError(f"log directory {d} does not exist")
    return dirs


def parse_configs(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="--config")
        out[key.strip()] = value.strip()
    return out


@dataclass
class VerifyReport:
    problems: list[str] = field(default_factory=list)
    segments: int = 0
    batches: int = 0


def _zeros_from(records: FileRecords, position: int) -> bool:
    """Whether every byte from ``position`` to the end is zero: the preallocated tail of an
    active segment (``preallocate=true``), which is end of data, not damage."""
    step = 1 << 20
    while position < records.size:
        chunk = records.read(position, step)
        if chunk.strip(b"\x00"):
            return False
        position += len(chunk)
    return True


def verify_partition(directory: Path, report: VerifyReport, *, compacted: bool = False) -> None:
    """CRC, sizes and offset order of every batch; index and time-index consistency; offsets
    missing between segments (a deleted segment) unless the topic is compacted, where the
    cleaner leaves such gaps."""
    next_offset: int | None = None
    live = held_by_writer(directory) or held_by_writer(directory.parent)
    segments = sorted(directory.glob("*" + fn.LOG_FILE_SUFFIX))
    expected = None if live else _clean_log_start(directory)
    if expected is not None:
        next_offset = expected  # the first segment must hold it: a gap before it is a loss
    for path in segments:
        try:
            base = fn.offset_from_file_name(path.name)
        except ValueError:
            continue  # not a segment: the loader ignores it too
        report.segments += 1
        if next_offset is not None and base > next_offset and (not compacted or expected):
            why = " (the log start offset)" if expected is not None else ""
            report.problems.append(
                f"{path}: offset gap: offsets {next_offset}{why} to {base - 1} are in no segment"
            )
        expected = None
        if live and path == segments[-1]:
            next_offset = _verify_active_segment(path, base, report)
            continue  # its index is the writer's: preallocated, unwritten entries are zeros
        try:
            records = FileRecords(path, writable=False)
        except FileNotFoundError:  # retention deleted it since the listing: not damage
            report.segments -= 1
            next_offset = None  # and no gap across it either
            continue
        try:
            last = base - 1
            with records.scanner(verify_crc=True, base_offset=base) as scan:
                for batch in scan:
                    report.batches += 1
                    last = batch.last_offset
                if scan.error is not None and not _zeros_from(records, scan.valid_bytes):
                    report.problems.append(
                        f"{path}: position {scan.error.position}: after offset {last}: {scan.error}"
                    )
                elif scan.error is None and scan.valid_bytes < records.size:
                    report.problems.append(
                        f"{path}: position {scan.valid_bytes}: {records.size - scan.valid_bytes} "
                        f"bytes of a partial batch after offset {last}"
                    )
            next_offset = last + 1
        finally:
            records.close_handler()
        dump = DumpReport()
        options = DumpOptions(verify_index_only=True)
        index = fn.offset_index_file(directory, base)
        time_index = fn.time_index_file(directory, base)
        try:
            if index.exists() and index.stat().st_size:
                dump_offset_index(index, options, dump)
            if time_index.exists() and time_index.stat().st_size and index.exists():
                dump_time_index(time_index, options, dump)
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
        except KafkaLogError as err:  # an index too damaged to walk is one more problem
            report.problems.append(f"{path.name}: index unusable: {err}")
        dump.finish()
        report.problems += [f"{path.name}: {line.strip()}" for line in dump.err if line.strip()]
    epochs = directory / fn.LEADER_EPOCH_CHECKPOINT
    if epochs.exists():
        try:
            LeaderEpochCheckpointFile(epochs).read()
        except CorruptCheckpointError as err:
            report.problems.append(str(err))


def _clean_log_start(directory: Path) -> int | None:
    """Where a cleanly closed partition's data begins, as its checkpoints say: the log start
    offset checkpoint's entry (a Log's own, or its log directory's, which Kafka writes only
    for a start above the first segment's base), else the first leader epoch's start offset,
    which retention and DeleteRecords move with the log start. None after a crash or while a
    writer runs, where a checkpoint may lag a deletion by its interval."""
    own = (directory / fn.LOG_START_OFFSET_CHECKPOINT).exists()
    home = directory if own else directory.parent
    if not (home / fn.CLEAN_SHUTDOWN_FILE).exists():
        return None
    try:
        tp = fn.parse_partition_dir_name(directory.name)
        start = OffsetCheckpointFile(home / fn.LOG_START_OFFSET_CHECKPOINT).read().get(tp)
    except (KafkaLogError, FileNotFoundError):
        start = None
    if start is not None:
        return start
    try:
        epochs = LeaderEpochCheckpointFile(directory / fn.LEADER_EPOCH_CHECKPOINT).read()
    except (KafkaLogError, FileNotFoundError):
        return None
    return epochs[0][1] if epochs else None


def _verify_active_segment(path: Path, base: int, report: VerifyReport) -> int:
    """The segment a live writer appends to, read as a lock-free reader reads it: the
    writer's batch in flight (partial at the end, in the preallocated zeros, or caught half
    copied) is no damage. The offset after its last batch."""
    last = base - 1
    try:
        for batch in scan_segment(SegmentFile(base, path, 0), tail_may_be_zeros=True):
            report.batches += 1
            last = batch.last_offset
    except CorruptRecordError as err:
        report.problems.append(f"{path}: position {err.position}: after offset {last}: {err}")
    return last + 1


@click.command()
@log_dirs_option
@user_errors
def verify(log_dirs: str) -> None:
    """Check every segment (CRC, sizes, offsets, indexes) without changing anything; exit 1
    with a report naming the segment, position and offset of each problem.

    \b
    Example:
      kafkalog verify --log-dirs data
    """
    report = VerifyReport()
    for d in existing_dirs(log_dirs):
        for name in (
            fn.RECOVERY_POINT_CHECKPOINT,
            fn.LOG_START_OFFSET_CHECKPOINT,
            fn.CLEANER_OFFSET_CHECKPOINT,
        ):
            if (d / name).exists():
                try:
                    OffsetCheckpointFile(d / name).read()
                except CorruptCheckpointError as err:
                    report.problems.append(str(err))
        partitions = [p for p in sorted(d.iterdir()) if p.is_dir()]
        if any(d.glob("*" + fn.LOG_FILE_SUFFIX)):
            partitions = [d]  # a partition directory given directly
        try:
            configs = topic_configs([d if partitions != [d] else d.parent])
        except CorruptCheckpointError as err:
            report.problems.append(str(err))
            configs = {}
        with progress(f"verify {d}", len(partitions)) as advance:
            for part in partitions:
                topic = part.name.rpartition("-")[0]
                policy = configs.get(topic, {}).get("cleanup.policy", "")
                verify_partition(part, report, compacted="compact" in policy)
                advance(1)
    for line in report.problems:
        click.echo(line)
    click.echo(
        f"checked {report.segments} segment(s), {report.batches} batch(es): "
        f"{len(report.problems)} problem(s)"
    )
    if report.problems:
        sys.exit(EXIT_PROBLEMS_FOUND)


@click.command()
@click.argument("partition_dirs", nargs=-1, required=True)
@user_errors
def recover(partition_dirs: tuple[str, ...]) -> None:
    """Run crash recovery on partition directories from offset 0 and report what was
    truncated or rebuilt.

    \b
    Example:
      kafkalog recover data/clicks-0
    """
    for d in partition_dirs:
        path = Path(d)
        if not path.is_dir():
            raise UnknownTopicOrPartitionError(f"partition directory {path} does not exist")
        # only a partition directory: recovery writes segment files into what it is given
        fn.parse_partition_dir_name(path.name)
        # Log.open takes the partition's lock and its log directory's: a live writer refuses.
        # The loader logs each repair as a warning; this command prints them itself, once.
        with quiet("kafkalog.log"):
            log = Log.open(path, had_clean_shutdown=False, recovery_point=0)
        actions = log.load_result.actions or ["nothing to repair"]
        for action in actions:
            click.echo(f"{path.name}: {action}")
        click.echo(
            f"{path.name}: checked {len(log.load_result.recovered_segments)} segment(s), "
            f"truncated {log.load_result.truncated_bytes} byte(s); log end offset "
            f"{log.log_end_offset}"
        )
        log.close()


@contextmanager
def quiet(name: str) -> Iterator[None]:
    """Warnings of logger ``name`` (and below) held back meanwhile; errors still show."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def broker_config_option(fn_: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config", "config_file", type=click.Path(dir_okay=False), default=None,
        help="The broker's server.properties: its log.* defaults apply, as on the broker.",
    )(fn_)  # fmt: skip


def policy_manager(log_dirs: str, config_file: str | None) -> LogManager:
    """A manager that deletes what the broker of these directories would: its topic defaults
    from ``config_file`` (a Kafka broker keeps them there, and only its run-time ones in the
    metadata log). Without it, kafkalog's defaults apply, which is said on stderr for a
    directory a Kafka broker formatted: its log.retention.hours=-1 would be unknown here."""
    dirs = existing_dirs(log_dirs)
    if config_file is None:
        if read_meta_properties(dirs):
            click.echo(
                f"warning: {dirs[0]} is a Kafka broker's (meta.properties) and no --config "
                "names its server.properties: Kafka's default topic configs apply",
                err=True,
            )
        return LogManager(dirs)
    server = ServerConfig.from_properties(config_file, {"log.dirs": ",".join(map(str, dirs))})
    return LogManager.from_server_config(server)


@click.command()
@log_dirs_option
@broker_config_option
@user_errors
def retention(log_dirs: str, config_file: str | None) -> None:
    """Apply retention once (time, size, log start offset) and report what went.

    \b
    Example:
      kafkalog retention --log-dirs /var/lib/kafka/data --config server.properties
    """
    with policy_manager(log_dirs, config_file) as manager:
        deleted = manager.run_retention()
        deleted += manager.cleaner.delete_old_segments()
        click.echo(f"deleted {deleted} segment(s)")


@click.command()
@log_dirs_option
@broker_config_option
@user_errors
def compact(log_dirs: str, config_file: str | None) -> None:
    """Compact every eligible compacted topic once and report each round."""
    with policy_manager(log_dirs, config_file) as manager:
        results = manager.run_cleaner()
        for r in results:
            if r.stats is None:
                click.echo(f"{r.topic_partition}: not cleaned: {r.error}")
                continue
            s = r.stats
            click.echo(
                f"{r.topic_partition}: offsets [{r.first_dirty_offset}, {r.end_offset}): "
                f"{s.messages_read} -> {s.messages_written} records, "
                f"{s.bytes_read} -> {s.bytes_written} bytes"
            )
        if not results:
            click.echo("nothing to compact")
