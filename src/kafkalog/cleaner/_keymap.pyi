# The compiled key map in _keymap.c / _keymap_runs.c (see kafkalog.cleaner.keymap for the
# meaning of each result). Records damage raises kafkalog.records._fastcodec.CorruptRecords
# (message, position); an invalid record InvalidRecords (message,).
from collections.abc import Callable

from typing_extensions import Buffer

class KeyOffsetMap:
    size: int  # keys in the map (read-only)
    log_size: int  # bytes of notes kept for the recopy (read-only)
    latest_offset: int  # the last offset mapped
    def __init__(self, limit: int, log_limit: int = 0, /) -> None: ...
    def put(self, key: Buffer, offset: int, /) -> None: ...
    def get(self, key: Buffer, /) -> int: ...
    def clear(self) -> None: ...
    def map_records(
        self,
        data: Buffer,
        count: int,
        base_offset: int,
        base_timestamp: int,
        has_log_append_time: bool,
        log_append_time: int,
        start: int,
        /,
    ) -> tuple[int, bool]: ...
    def filter_records(
        self,
        data: Buffer,
        count: int,
        base_offset: int,
        base_timestamp: int,
        has_log_append_time: bool,
        log_append_time: int,
        keep_tombstones: bool,
        has_horizon: bool,
        horizon: int,
        new_horizon: int,
        /,
    ) -> tuple[int, int, int, bytes | None, int, int, int | None, int]: ...
    def map_region(
        self,
        buffer: Buffer,
        segment: int,
        position: int,
        until: int,
        end: int,
        start: int,
        max_batch_size: int,
        /,
    ) -> tuple[int, int, bool]: ...
    def filter_region(
        self,
        buffer: Buffer,
        segment: int,
        position: int,
        until: int,
        end: int,
        max_batch_size: int,
        upper_bound_offset: int,
        last_producer_ids: set[int],
        current_time: int,
        new_horizon: int,
        crc32c: Callable[[memoryview], int],
        /,
    ) -> tuple[int, int, int, int, list[tuple[int, int, int, int, bool]], bytes]: ...
