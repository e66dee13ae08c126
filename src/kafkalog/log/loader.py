"""Loading a partition directory and recovering it after a crash (Kafka's LogLoader), as named
phases.

Why: the loader decides what survives a crash: it finishes or rolls back interrupted swaps,
deletes leftovers, rebuilds missing indexes, and after an unclean shutdown validates every
segment from the recovery point, truncating at the first invalid byte and dropping what follows.
Each phase is a function; the result says what was done. Refuses: serving data (the Log does).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.clock import Clock
from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log.config import LogConfig
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.producer_state_manager import (
    ProducerStateConfig,
    ProducerStateManager,
    rebuild_producer_state,
)
from kafkalog.log.split import split_overflowed_segment
from kafkalog.log.validator import AppendOrigin
from kafkalog.records import AnyBatch
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, fsync_dir
from kafkalog.storage.segment import LogSegment, LogSegmentOffsetOverflowError
from kafkalog.storage.segments import LogSegments
from kafkalog.types import INT64_MAX

logger = logging.getLogger("kafkalog.log.loader")


@dataclass
class LoadResult:
    """The loaded segments and offsets, and a report of every repair made."""

    segments: LogSegments
    producer_state: ProducerStateManager
    log_start_offset: int
    recovery_point: int
    next_offset: int
    actions: list[str] = field(default_factory=list)
    truncated_bytes: int = 0
    recovered_segments: list[int] = field(default_factory=list)
    deleted_segments: list[int] = field(default_factory=list)

    def note(self, message: str) -> None:
        self.actions.append(message)
        logger.warning(message)


class _Loader:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        epochs: LeaderEpochCache,
        rng: random.Random,
        result: LoadResult,
        log_start_offset: int,
    ) -> None:
        self.dir = directory
        self.log_start_offset = log_start_offset
        self.config = config
        self.clock = clock
        self.epochs = epochs
        self.rng = rng
        self.result = result
        self.params = config.segment_params()
        self.last_recovered: LogSegment | None = None

    def _segment(self, base: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.dir,
            base,
            self.params,
            self.clock,
            file_suffix=suffix,
            exists=True,
            roll_jitter_ms=self.config.random_segment_jitter(self.rng),
        )

    def _recovery_hook(
        self, seg: LogSegment, state: ProducerStateManager
    ) -> Callable[[AnyBatch], None]:
        """Per recovered batch: leader epochs, producer state, and the segment's ABORT entries
        (Kafka's LogSegment.recover; LogSegmentTest's recovery cases)."""
        epochs = self.epochs

        def on_batch(batch: AnyBatch) -> None:
            epoch = batch.partition_leader_epoch
            if batch.magic >= 2 and epoch >= 0:
                latest = epochs.latest_epoch()
                if latest is None or epoch > latest:
                    epochs.assign(epoch, batch.base_offset)
            pid = batch.producer_id
            if pid >= 0:
                info = state.prepare_update(pid, AppendOrigin.REPLICATION)
                txn = info.append(batch)
                state.update(info)
                if txn is not None:
                    state.complete_txn_into(txn, seg.txn_index)
            state.update_map_end_offset(batch.last_offset + 1)

        return on_batch

    # phase 1 -----------------------------------------------------------------------------------
    def remove_temp_files(self) -> list[Path]:
        cleaned: list[Path] = []
        swaps: list[Path] = []
        for path in sorted(self.dir.iterdir()):
            if not path.is_file():
                continue
            name = path.name
            if name.endswith(fn.DELETED_FILE_SUFFIX) and not name.endswith(
                fn.CHECKPOINT_DELETED_SUFFIX
            ):
                delete_if_exists(path)
                self.result.note(f"deleted leftover {path}")
            elif not name.split(".", 1)[0].isdigit():
                continue  # not a segment's file: Kafka leaves unknown files alone
            elif name.endswith(fn.CLEANED_FILE_SUFFIX):
                cleaned.append(path)
            elif name.endswith(fn.SWAP_FILE_SUFFIX):
                swaps.append(path)
        min_cleaned = min((fn.offset_from_file_name(p.name) for p in cleaned), default=INT64_MAX)
        kept = []
        for swap in swaps:
            if fn.offset_from_file_name(swap.name) >= min_cleaned:
                delete_if_exists(swap)
                self.result.note(f"deleted unfinished swap {swap}")
            else:
                kept.append(swap)
        for path in cleaned:
            delete_if_exists(path)
            self.result.note(f"deleted cleaner leftover {path}")
        return kept

    # phase 2 -----------------------------------------------------------------------------------
    def complete_swaps(self, swaps: list[Path]) -> None:
        log_swaps = [p for p in swaps if p.name.endswith(fn.LOG_FILE_SUFFIX + fn.SWAP_FILE_SUFFIX)]
        if not log_swaps:
            for p in swaps:  # index swaps without their data file
                delete_if_exists(p)
            return
        bases, nexts = [], []
        for path in log_swaps:
            seg = self._segment(fn.offset_from_file_name(path.name), fn.SWAP_FILE_SUFFIX)
            bases.append(seg.base_offset)
            nexts.append(seg.read_next_offset())
            seg.close_handlers()
        low, high = min(bases), max(nexts)
        for path in sorted(self.dir.iterdir()):
            name = path.name
            if not path.is_file() or name.endswith(fn.SWAP_FILE_SUFFIX):
                continue
            if not (fn.is_log_file(name) or fn.is_index_file(name) or fn.is_snapshot_file(name)):
                continue
            if low <= fn.offset_from_file_name(name) < high:
                delete_if_exists(path)
                self.result.note(f"deleted {path}, replaced by a completed swap")
        for path in sorted(self.dir.iterdir()):
            if path.name.endswith(fn.SWAP_FILE_SUFFIX):
                path.rename(fn.strip_suffix(path, fn.SWAP_FILE_SUFFIX))
                self.result.note(f"completed swap of {path.name}")
        fsync_dir(self.dir)

    # phase 3 -----------------------------------------------------------------------------------
    def load_segments(self) -> None:
        files = []
        for p in sorted(self.dir.iterdir()):
            if not p.is_file() or p.is_symlink():
                if p.is_symlink() and (fn.is_log_file(p.name) or fn.is_index_file(p.name)):
                    self.result.note(f"ignored {p}: a symbolic link, not a segment file")
                continue
            if fn.is_log_file(p.name) or fn.is_index_file(p.name):
                try:
                    fn.offset_from_file_name(p.name)
                except ValueError:
                    self.result.note(f"ignored {p}: its name does not start with an offset")
                    continue
            files.append(p)
        logs = {p.name for p in files if fn.is_log_file(p.name)}
        for path in files:
            name = path.name
            if fn.is_index_file(name):
                base = fn.offset_from_file_name(name)
                if fn.log_file(self.dir, base).name not in logs:
                    delete_if_exists(path)
                    self.result.note(f"deleted orphan index {path}")
            elif fn.is_log_file(name):
                base = fn.offset_from_file_name(name)
                time_index_existed = fn.time_index_file(self.dir, base).exists()
                seg = self._segment(base)
                try:
                    seg.sanity_check(time_index_existed)
                except (InvalidOffsetError, CorruptIndexError) as err:
                    self.result.note(f"rebuilding the indexes of {path}: {err}")
                    self.result.segments.add(seg)
                    self.recover_segment(seg)
                    continue
                self.result.segments.add(seg)

    def recover_segment(self, seg: LogSegment) -> int:
        """Recover ``seg`` (already in the segment map); a segment whose offsets overflow its base
        is split first (Kafka's LocalLog.splitOverflowedSegment, KAFKA-6264) and its parts recovered
        in its place."""
        self.last_recovered = seg
        try:
            return self._recover_one(seg)
        except LogSegmentOffsetOverflowError as err:
            self.result.note(f"splitting {seg.log.path}: {err}")
            self.result.segments.remove(seg.base_offset)
            parts = split_overflowed_segment(seg, self.params, self.clock)
            for part in parts:
                self.result.segments.add(part)
            truncated = sum(self._recover_one(part) for part in parts)
            self.last_recovered = parts[-1]
            return truncated

    def _recover_one(self, seg: LogSegment) -> int:
        # a private producer state, rebuilt up to this segment from the snapshots, so the
        # segment's transaction index can be rebuilt; its snapshot spares the next recovery
        state = ProducerStateManager(self.dir, self.result.producer_state.config)
        rebuild_producer_state(
            state,
            self.result.segments,
            log_start_offset=self.log_start_offset,
            last_offset=seg.base_offset,
            now=self.clock.milliseconds(),
            reload_from_clean_shutdown=False,
        )
        rec = seg.recover(on_batch=self._recovery_hook(seg, state), max_batch_size=None)
        state.take_snapshot()
        self.result.recovered_segments.append(seg.base_offset)
        if rec.truncated_bytes:
            self.result.truncated_bytes += rec.truncated_bytes
            self.result.note(
                f"truncated {rec.truncated_bytes} bytes of {seg.log.path} at position "
                f"{rec.valid_bytes} (next offset {rec.next_offset}): {rec.reason or rec.stop.value}"
            )
        return rec.truncated_bytes

    # phase 4 -----------------------------------------------------------------------------------
    def recover_tail(self, had_clean_shutdown: bool, recovery_point: int, log_start: int) -> None:
        segments = self.result.segments
        active = segments.last_segment()
        if had_clean_shutdown and active is not None:
            # A marker says the files were closed cleanly, but a marker can be stale (copied
            # directories, a restore): an append must never land behind bytes nobody
            # validated, so the active segment's tail is checked from its last index entry.
            problem = active.tail_problem()
            if problem is not None:
                self.result.note(f"the tail of {active.log.path} is damaged: {problem}")
                had_clean_shutdown = False
                recovery_point = min(recovery_point, active.base_offset)
        if not had_clean_shutdown:
            for seg in segments.values(from_offset=recovery_point):
                try:
                    truncated = self.recover_segment(seg)
                except InvalidOffsetError as err:
                    # damage found in the data (Kafka's LogLoader.recoverLog): the only reason
                    # recovery may drop records. A disk that fails to take a rebuilt index or a
                    # snapshot is not damage: that error ends the open, every record kept.
                    self.result.note(f"emptying {seg.log.path} after a failed recovery: {err}")
                    truncated = seg.truncate_to(seg.base_offset)
                if truncated:
                    anchor = (self.last_recovered or seg).base_offset  # a split's last part
                    for later in segments.higher_segments(anchor):
                        self.delete_segment(later, "it follows a truncated segment")
                    break
        last = segments.last_segment()
        if last is not None and last.read_next_offset() < log_start:
            for seg in list(segments):
                self.delete_segment(seg, f"the log ends below the log start offset {log_start}")
            self.epochs.clear()
        if segments.is_empty():
            seg = LogSegment(
                self.dir,
                log_start,
                self.params,
                self.clock,
                roll_jitter_ms=self.config.random_segment_jitter(self.rng),
            )
            segments.add(seg)

    def delete_segment(self, seg: LogSegment, why: str) -> None:
        self.result.segments.remove(seg.base_offset)
        seg.delete_files()
        self.result.deleted_segments.append(seg.base_offset)
        self.result.note(f"deleted segment {seg.base_offset} because {why}")


def load(
    directory: Path,
    config: LogConfig,
    clock: Clock,
    epochs: LeaderEpochCache,
    *,
    had_clean_shutdown: bool,
    recovery_point: int,
    log_start_offset: int,
    rng: random.Random,
    producer_state_config: ProducerStateConfig | None = None,
    remote_log_enabled: bool = False,
) -> LoadResult:
    """Run the loader's phases over ``directory`` (Kafka's LogLoader). With remote storage
    enabled the log start offset stays where it was checkpointed, below the local segments."""
    state = ProducerStateManager(directory, producer_state_config)
    result = LoadResult(LogSegments(), state, log_start_offset, recovery_point, log_start_offset)
    loader = _Loader(directory, config, clock, epochs, rng, result, log_start_offset)
    try:
        return _run_phases(
            loader, had_clean_shutdown, recovery_point, log_start_offset, remote_log_enabled
        )
    except BaseException:
        for seg in list(result.segments):  # a failed open holds no descriptor
            seg.close_handlers()
        if loader.last_recovered is not None:
            loader.last_recovered.close_handlers()
        raise


def _run_phases(
    loader: _Loader,
    had_clean_shutdown: bool,
    recovery_point: int,
    log_start_offset: int,
    remote_log_enabled: bool,
) -> LoadResult:
    result, config, clock, epochs = loader.result, loader.config, loader.clock, loader.epochs
    state = result.producer_state
    swaps = loader.remove_temp_files()
    loader.complete_swaps(swaps)
    loader.load_segments()
    loader.recover_tail(had_clean_shutdown, recovery_point, log_start_offset)
    segments = result.segments
    active = segments.last_segment()
    first = segments.first_segment()
    assert active is not None and first is not None
    next_offset = active.read_next_offset()
    result.next_offset = next_offset
    result.recovery_point = next_offset if had_clean_shutdown else min(recovery_point, next_offset)
    active.resize_indexes(config.segment_index_bytes)
    epochs.truncate_from_end(next_offset)
    result.log_start_offset = (
        log_start_offset if remote_log_enabled else max(log_start_offset, first.base_offset)
    )
    epochs.truncate_from_start(result.log_start_offset)
    # recovery's private producer states wrote snapshots this one has not seen
    state.remove_stray_snapshots(segments.base_offsets)
    rebuild_producer_state(
        state,
        segments,
        log_start_offset=result.log_start_offset,
        last_offset=next_offset,
        now=clock.milliseconds(),
        reload_from_clean_shutdown=had_clean_shutdown,
    )
    return result
