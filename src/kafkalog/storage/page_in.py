"""Asking the kernel to map a stretch of a mapped file into the page tables now.

Why: a walk over a freshly mapped segment takes a page fault every few pages; on this kind of
machine filling the page tables costs about as much as copying the bytes. Linux 5.14's
MADV_POPULATE_READ does it in one call, which a worker thread can make for the next stretch
while the cleaner's compiled walk (which releases the GIL) parses this one. The compiled helper
(_pagein.c) lets go of the GIL for the call; Python's mmap.madvise, the fallback, does not.
Refuses: deciding what to map (FileRecords owns the mapping and its lock) and retrying: a
kernel without the advice is not asked again in this process.
"""

from __future__ import annotations

import errno
import mmap
import sys
from types import ModuleType

from kafkalog.storage.background import BackgroundWorker

helper: ModuleType | None
try:
    from kafkalog.storage import _pagein as helper
except ImportError:  # pragma: no cover -- no C compiler at install time
    helper = None

# MADV_POPULATE_READ (Python 3.11's mmap does not name it yet); None: unavailable
populate_read: int | None = getattr(
    mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else None
)
WORKER = BackgroundWorker("kafkalog-pagein")


def populate(view: memoryview, start: int, end: int) -> bool:
    """Map the pages of ``view[start:end]`` (a view of an mmap) now; False if the kernel
    refused. The view pins the mapping: a concurrent close waits until it is released."""
    global populate_read  # noqa: PLW0603 -- learnt once per process
    advice = populate_read
    if advice is None or end <= start:
        return False
    aligned = start - start % mmap.PAGESIZE
    try:
        if helper is not None:
            helper.madvise(view, aligned, end, advice)
        else:
            mapping = view.obj
            assert isinstance(mapping, mmap.mmap)
            mapping.madvise(advice, aligned, end - aligned)
    except OSError as err:
        if err.errno == errno.EINVAL:  # a kernel before 5.14
            populate_read = None
        return False  # EFAULT past a truncated end concerns this call only
    return True
