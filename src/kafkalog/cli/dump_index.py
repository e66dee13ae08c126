"""``kafkalog dump-log`` for index, txn-index and producer-snapshot files (DumpLogSegments).

Why: Kafka's dump tool checks an index against its log (each entry must point at the batch
ending at the indexed offset; time entries must match the batch's max timestamp and increase)
and prints the entries; scripts rely on both the lines and the mismatch report.
Refuses: repairing anything (``kafkalog recover`` does).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from kafkalog.cli.dump_log import DumpOptions, DumpReport, _optional_long, dump_log
from kafkalog.errors import InvalidArgumentError, KafkaLogError
from kafkalog.records.scanner import BatchScanner
from kafkalog.storage import filenames as fn
from kafkalog.storage.file_records import FileRecords
from kafkalog.storage.offset_index import OffsetIndex
from kafkalog.storage.producer_snapshot import read_snapshot
from kafkalog.storage.time_index import TimeIndex
from kafkalog.storage.txn_index import TransactionIndex


def _first_batch(records: FileRecords, position: int, max_size: int) -> tuple[int, int] | None:
    """(last offset, max timestamp) of the batch at ``position``."""
    data = records.read(position, min(max_size, max(records.size - position, 0)))
    for batch in BatchScanner(data, verify_crc=False):
        return batch.last_offset, batch.max_timestamp
    return None


def _only_checked(
    index: OffsetIndex | TimeIndex, path: Path, options: DumpOptions, report: DumpReport
) -> bool:
    """Kafka's answer for ``--index-sanity-check`` or an empty index; True if that is all.
    DumpLogSegments says "is empty." of an offset index only; an empty time index prints
    nothing, and its sanity check comes first."""
    if isinstance(index, TimeIndex) and options.index_sanity_check:
        index.sanity_check()
        report.out.append(f"{path} passed sanity check.")
        return True
    if index.entries == 0:
        if isinstance(index, OffsetIndex):
            report.out.append(f"{path} is empty.")
        return True
    if options.index_sanity_check:
        index.sanity_check()
        report.out.append(f"{path} passed sanity check.")
        return True
    return False


def dump_offset_index(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = fn.offset_from_file_name(path.name)
    index = OffsetIndex(path, base, max(path.stat().st_size, 8), writable=False)
    try:
        if _only_checked(index, path, options, report):
            return
        log = FileRecords(fn.log_file(path.parent, base), writable=False)
        mismatches: list[tuple[int, int]] = []
        try:
            for i in range(index.entries):
                entry = index.entry_at(i)
                if i > 0 and entry.offset == base:
                    break  # the zero-filled tail of a preallocated index
                found = _first_batch(log, entry.position, options.max_message_size)
                if found is not None and found[0] != entry.offset:
                    mismatches.append((entry.offset, found[0]))
                if not options.verify_index_only:
                    report.out.append(f"offset: {entry.offset} position: {entry.position}")
        finally:
            log.close()
        if mismatches:
            report.index_mismatches[os.path.abspath(path)] = mismatches
    finally:
        index.close()


def dump_time_index(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = fn.offset_from_file_name(path.name)
    index = TimeIndex(path, base, max(path.stat().st_size, 12), writable=False)
    try:
        if _only_checked(index, path, options, report):
            return
        offsets = OffsetIndex(
            fn.offset_index_file(path.parent, base),
            base,
            max(fn.offset_index_file(path.parent, base).stat().st_size, 8),
            writable=False,
        )
        log = FileRecords(fn.log_file(path.parent, base), writable=False)
        key = os.path.abspath(path)  # File#getAbsolutePath: no symlinks resolved
        previous = -1
        try:
            for i in range(index.entries):
                entry = index.entry_at(i)
                if i > 0 and entry.offset == base:
                    break
                position = offsets.lookup(entry.offset).position
                found = None
                for batch in log.batches(position):
                    if batch.last_offset >= entry.offset:
                        found = batch
                        break
                if found is None:
                    report.time_not_found.setdefault(key, []).append((entry.offset, -1))
                elif found.last_offset != entry.offset:
                    report.time_not_found.setdefault(key, []).append(
                        (entry.offset, found.last_offset)
                    )
                else:
                    stamps = [r.timestamp or -1 for r in found.records()] or [found.max_timestamp]
                    if max(stamps) != entry.timestamp:
                        report.time_mismatches.setdefault(key, []).append(
                            (entry.timestamp, max(stamps))
                        )
                    if previous >= entry.timestamp:
                        report.time_out_of_order.setdefault(key, []).append(
                            (entry.timestamp, previous)
                        )
                previous = entry.timestamp
                if not options.verify_index_only:
                    report.out.append(f"timestamp: {entry.timestamp} offset: {entry.offset}")
        finally:
            log.close()
            offsets.close()
    finally:
        index.close()


def dump_txn_index(path: Path, report: DumpReport) -> None:
    index = TransactionIndex(path, fn.offset_from_file_name(path.name))
    try:
        for t in index.all_aborted():
            report.out.append(
                f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
                f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"
            )
    finally:
        index.close()


def dump_snapshot(path: Path, report: DumpReport) -> None:
    try:
        entries = read_snapshot(path)
    except KafkaLogError as err:
        report.err.append(str(err))
        return
    for e in entries:
        line = (
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional_long(e.current_txn_first_offset)} "
            f"lastTimestamp: {e.timestamp} "
        )
        if e.last_offset >= 0:
            first_seq = (e.last_sequence - e.offset_delta) % 2**31
            line += (
                f"firstSequence: {first_seq} lastSequence: {e.last_sequence} "
                f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} "
                f"timestamp: {e.timestamp}"
            )
        report.out.append(line)


KNOWN_SUFFIXES = (
    fn.LOG_FILE_SUFFIX,
    fn.INDEX_FILE_SUFFIX,
    fn.TIME_INDEX_FILE_SUFFIX,
    fn.TXN_INDEX_FILE_SUFFIX,
    fn.PRODUCER_SNAPSHOT_FILE_SUFFIX,
)


def dump_files(files: list[str], options: DumpOptions, report: DumpReport) -> DumpReport:
    """Dump each file by its suffix, as DumpLogSegments dispatches, into ``report``."""
    for shown in files:
        path = Path(shown)
        name = path.name
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no such file", shown)
        if not name.split(".", 1)[0].isdigit() and name.endswith(KNOWN_SUFFIXES):
            raise InvalidArgumentError(f"{shown}: a segment file name starts with its offset")
        is_log = name.endswith((fn.LOG_FILE_SUFFIX, ".checkpoint"))
        if not (is_log and options.json):  # --json prints JSON lines only
            report.out.append(f"Dumping {shown}")  # for every file, as Kafka's tool does
        if is_log:
            dump_log(path, shown, options, report)
        elif name.endswith(fn.INDEX_FILE_SUFFIX):
            dump_offset_index(path, options, report)
        elif name.endswith(fn.TIME_INDEX_FILE_SUFFIX):
            dump_time_index(path, options, report)
        elif name.endswith(fn.TXN_INDEX_FILE_SUFFIX):
            dump_txn_index(path, report)
        elif name.endswith(fn.PRODUCER_SNAPSHOT_FILE_SUFFIX):
            dump_snapshot(path, report)
        else:
            report.err.append(f"Ignoring unknown file {shown}")
    report.finish(options.kafka_version)
    return report
