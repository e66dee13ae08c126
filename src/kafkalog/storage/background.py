"""Work handed to the second core: one named worker thread per purpose and process.

Why: a few storage paths can overlap two things that each release the GIL -- checking a
follower append's CRCs while its bytes are written, paging in the next stretch of a segment
while the cleaner's compiled walk parses this one. A bare thread and queue, not an executor:
submitting to ThreadPoolExecutor costs about 16 µs, more than some of the work it hides.
Refuses: results other than "done" or the job's own exception, and ordering across workers.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable


class BackgroundJob:
    """Work for a BackgroundWorker: ``run`` (the given function, or a subclass's override).

    ``wait()`` blocks until it has run and raises what it raised; call it any number of times.
    """

    __slots__ = ("_done", "_error", "_work")

    def __init__(self, work: Callable[[], object] | None = None) -> None:
        self._work = work
        self._error: BaseException | None = None
        self._done = threading.Lock()
        self._done.acquire()  # released once the job has run

    def run(self) -> None:
        if self._work is not None:
            self._work()

    def execute(self) -> None:
        try:
            self.run()
        except BaseException as err:  # handed to the waiter, not lost in the worker
            self._error = err
        finally:
            self._done.release()

    def wait(self) -> None:
        with self._done:
            pass
        if self._error is not None:
            raise self._error


class BackgroundWorker:
    """A daemon thread named ``name`` running submitted jobs in order, started on first use.
    A forked child starts its own (the parent's thread does not survive the fork)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._queues: dict[int, queue.SimpleQueue[BackgroundJob]] = {}

    def submit(self, job: BackgroundJob) -> BackgroundJob:
        self._jobs().put(job)
        return job

    def _jobs(self) -> queue.SimpleQueue[BackgroundJob]:
        pid = os.getpid()
        with self._lock:
            jobs = self._queues.get(pid)
            if jobs is None:
                self._queues.clear()
                jobs = self._queues[pid] = queue.SimpleQueue()
                threading.Thread(target=_work, args=(jobs,), name=self.name, daemon=True).start()
            return jobs


def _work(jobs: queue.SimpleQueue[BackgroundJob]) -> None:
    while True:
        jobs.get().execute()
