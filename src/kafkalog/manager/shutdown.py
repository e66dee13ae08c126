"""Closing every log of a LogManager (Kafka's LogManager.shutdown).

Why: a clean shutdown is what lets the next start skip recovery, so its order matters and is
kept apart from the manager's other work: close every log in parallel, then write each
directory's checkpoints, then its clean-shutdown marker, and unlock the directories whatever
failed. Refuses: writing the marker after any failure (the next start must recover), and
leaving a directory locked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from kafkalog.log.log import Log
from kafkalog.manager.log_dir import LogDirectory


def close_logs(
    logs: Iterable[Log],
    dirs: list[LogDirectory],
    *,
    threads: int,
    write_checkpoints: Callable[[], None],
    partial: bool,
) -> None:
    """``partial``: the manager opened some partitions only, so it recovered only those; a
    directory whose last shutdown was unclean stays unclean for the next full load."""
    failures: list[BaseException] = []

    def close(log: Log) -> None:
        try:
            log.close()
        except BaseException as err:
            failures.append(err)

    try:
        with ThreadPoolExecutor(threads, thread_name_prefix="kafkalog-close") as pool:
            list(pool.map(close, list(logs)))
        if failures:
            raise failures[0]
        write_checkpoints()
        for d in dirs:
            if not partial or d.had_clean_shutdown:
                d.mark_clean_shutdown()
    finally:
        for d in dirs:
            d.release()
