"""The end of a cleaned group, on a worker thread while the next group is recopied.

Why: after recopying a group the cleaner trims the cleaned segment's indexes, flushes it, gives
it the last source segment's mtime and swaps it in (spec §12.5, §12.7), as Kafka does; that is
mostly waiting on fsyncs, which release the GIL, so it overlaps the next group's recopy. The
groups' segments are disjoint, the on-disk steps and their order within a group are Kafka's,
and a crash with one group swapping and the next being written reloads as either would alone
(the loader completes a group whose ``.swap`` files are all there and discards ``.cleaned``).
Refuses: running two swaps of one log at once -- the next group's swap needs this one's
segments generation, so its caller waits for ``result`` first.
"""

from __future__ import annotations

from kafkalog.log.log import Log
from kafkalog.storage.background import BackgroundJob, BackgroundWorker
from kafkalog.storage.segment import LogSegment


class FinishGroup(BackgroundJob):
    """Trim, flush, stamp and swap in ``cleaned`` for ``sources``; its failure removes the
    ``.cleaned`` files."""

    def __init__(
        self, log: Log, cleaned: LogSegment, sources: list[LogSegment], generation: int
    ) -> None:
        super().__init__()
        self.log = log
        self.cleaned = cleaned
        self.sources = sources
        self.generation = generation

    def run(self) -> None:
        cleaned = self.cleaned
        try:
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.log.set_last_modified_ms(self.sources[-1].log.last_modified_ms())
            self.log.replace_segments([cleaned], self.sources, self.generation)
        except BaseException:
            cleaned.delete_files()
            raise
        self.generation = self.log.segments_generation

    def result(self, unless_failed: LogSegment | None = None) -> int:
        """Wait; the log's segments generation after the swap. If the job failed, its error is
        raised and ``unless_failed`` (the next group's segment, not yet handed on) goes too."""
        try:
            self.wait()
        except BaseException:
            if unless_failed is not None:
                unless_failed.delete_files()
            raise
        return self.generation


def finish_group(
    log: Log, cleaned: LogSegment, sources: list[LogSegment], generation: int
) -> FinishGroup:
    """Start finishing ``cleaned`` on the worker; ``generation`` is the log's segments
    generation the swap expects (the round's, or the one after the group before)."""
    return WORKER.submit(FinishGroup(log, cleaned, sources, generation))


WORKER = BackgroundWorker("kafkalog-cleaner-swap")
