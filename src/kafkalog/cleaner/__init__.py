"""Log compaction (Kafka's LogCleaner): the offset map, the cleaning rules, one round's recopy and
swap, and the manager and threads that choose which log to clean.

Why a package: compaction is the one part of Kafka's storage that rewrites data already written;
its pieces are kept small and separately testable. Refuses: anything but compacted logs.
"""

from kafkalog.cleaner.cleaner import Cleaner, CleanerStats
from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.manager import CleaningResult, LogCleaner, LogCleanerManager
from kafkalog.cleaner.offset_map import DigestOffsetMap, ExactOffsetMap, OffsetMap, new_offset_map

__all__ = [
    "Cleaner",
    "CleanerConfig",
    "CleanerStats",
    "CleaningResult",
    "LogCleaner",
    "LogCleanerManager",
    "DigestOffsetMap",
    "ExactOffsetMap",
    "OffsetMap",
    "new_offset_map",
]
