"""Getting a stretch of a mapped file into the page tables before a walk reaches it.

Why: a walk over a freshly mapped segment takes a page fault at every page it first touches; on
this kind of machine that costs more than copying the bytes. The kernel maps a whole
fault-around window (``fault_around_bytes``, 64 KiB unless an administrator changed it) at each
fault, so one read a window, made by a worker thread while the cleaner's compiled walk (which
releases the GIL) parses the stretch before, maps the stretch for a quarter of the faults --
and measured here for less than half of what MADV_POPULATE_READ pays for the same pages. The
compiled helper (_pagein.c) makes the reads without the GIL; without it nothing is paged in
ahead (a Python loop would hold the GIL the walk needs to start its next call).
It lives with the cleaner, its only user: FileRecords keeps one mechanism for every reader
(``mapped``: a pinned view of its cached mapping), and a page-in is one more such reader.
Refuses: deciding what to map (FileRecords owns the mapping and its lock), and reading past the
file's end: the view is clipped to the data, because a read past it is SIGBUS, not an error.
"""

from __future__ import annotations

from types import ModuleType

from kafkalog.errors import LogClosedError
from kafkalog.storage.background import BackgroundJob, BackgroundWorker
from kafkalog.storage.file_records import FileRecords

helper: ModuleType | None
try:
    from kafkalog.cleaner import _pagein as helper
except ImportError:  # pragma: no cover -- no C compiler at install time
    helper = None

# Linux's default fault_around_bytes: each read's fault maps this much around it. A smaller
# setting leaves pages for the walk to fault itself; nothing goes wrong, it is only slower.
FAULT_AROUND_BYTES = 64 << 10
WORKER = BackgroundWorker("kafkalog-pagein")


def available() -> bool:
    """Whether paging in ahead can overlap a walk in this process."""
    return helper is not None


def populate(view: memoryview, start: int, end: int) -> bool:
    """Map the pages of ``view[start:end]`` (a view of an mmap of a file at least ``end`` bytes
    long) now; False if there is nothing to do. The view pins the mapping: a concurrent close
    waits until it is released."""
    if helper is None or end <= start:
        return False
    helper.touch(view, start, end, FAULT_AROUND_BYTES)
    return True


def page_in(file: FileRecords, start: int, end: int) -> bool:
    """Map the pages of ``file``'s data ``[start, end)`` into this process's page tables now,
    rather than at a fault every page as a walk first touches them; the mapping is made if
    there is none yet, so that a walk can be given the next segment's first stretch. Best
    effort: False where it cannot be done (nothing there, a closed file, no helper)."""
    if helper is None or end <= start:
        return False
    try:
        with file.mapped(end) as view:
            return populate(view, start, len(view))
    except LogClosedError:
        return False


def page_in_ahead(file: FileRecords, start: int, end: int) -> BackgroundJob | None:
    """``page_in`` on the worker thread, so a walk over the range before it does not wait;
    None where paging in is not possible. Waiting on the job is optional."""
    if not available():
        return None
    return WORKER.submit(BackgroundJob(lambda: page_in(file, start, end)))
