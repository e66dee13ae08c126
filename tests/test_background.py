"""The background worker (CRC checks, page-in ahead) and paging a mapped segment in."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kafkalog.storage import file_records
from kafkalog.storage.background import BackgroundJob, BackgroundWorker
from kafkalog.storage.file_records import FileRecords


def test_jobs_run_in_order_on_the_worker_and_hand_back_their_errors() -> None:
    worker = BackgroundWorker("kafkalog-test")
    seen: list[tuple[int, str]] = []
    jobs = [
        worker.submit(BackgroundJob(lambda i=i: seen.append((i, threading.current_thread().name))))
        for i in range(5)
    ]

    def fail() -> None:
        raise ValueError("bad job")

    failing = worker.submit(BackgroundJob(fail))
    for job in jobs:
        job.wait()
    assert seen == [(i, "kafkalog-test") for i in range(5)]
    for _ in range(2):  # wait() may be called again and raises again
        with pytest.raises(ValueError, match="bad job"):
            failing.wait()


def test_paging_in_a_mapped_range_leaves_the_data_as_it_was(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(data)
    try:
        assert not records.page_in(0, len(data))  # nothing mapped yet: nothing to do
        with records.mapped() as view:
            done = records.page_in(4097, len(data) + 4096)  # unaligned, past the end: clipped
            if file_records._populate_read is None:
                pytest.skip("this kernel cannot populate page tables on request")
            assert done
            job = records.page_in_ahead(0, 1 << 20)
            assert job is not None
            job.wait()
            assert bytes(view) == data
        assert not records.page_in(10, 10)  # an empty range
    finally:
        records.close()
