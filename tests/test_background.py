"""The background worker (CRC checks, page-in ahead) and paging a mapped segment in."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kafkalog.cleaner import page_in
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


def test_paging_in_a_range_leaves_the_data_as_it_was(tmp_path: Path) -> None:
    if not page_in.available():
        pytest.skip("the _pagein extension is not built")
    data = bytes(range(256)) * 4096  # 1 MiB
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(data)
    try:
        assert page_in.page_in(records, 0, 4096)  # nothing mapped yet: the mapping is made
        with records.mapped() as view:
            assert page_in.page_in(
                records, 4097, len(data) + 4096
            )  # unaligned, past the end: clipped
            job = page_in.page_in_ahead(records, 0, 1 << 20)
            assert job is not None
            job.wait()
            assert bytes(view) == data
        assert not page_in.page_in(records, 10, 10)  # an empty range
        assert not page_in.page_in(records, len(data), len(data) + 10)  # nothing there
    finally:
        records.close()
    assert not page_in.page_in(records, 0, 10)  # closed: nothing to do, no error


def test_without_the_helper_nothing_is_paged_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_in, "helper", None)  # a Python loop would hold the walk's GIL
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(b"x" * 8192)
    try:
        with records.mapped():
            assert not page_in.page_in(records, 0, 8192)
            assert page_in.page_in_ahead(records, 0, 8192) is None
    finally:
        records.close()


def test_the_helper_reads_only_inside_its_buffer() -> None:
    helper = page_in.helper
    if helper is None:
        pytest.skip("the _pagein extension is not built")
    buffer = bytearray(b"\x01" * (1 << 16))
    helper.touch(buffer, 10, 10, 4096)  # an empty range
    helper.touch(buffer, -5, 1 << 30, 4096)  # clipped to the buffer
    helper.touch(memoryview(buffer)[100:], 0, 1 << 16, 1)  # every byte, unaligned start
    assert buffer == b"\x01" * (1 << 16)  # read, never written
    with pytest.raises(ValueError, match="stride must be positive"):
        helper.touch(buffer, 0, 10, 0)


def test_truncation_waits_for_a_page_in_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page-in reads the mapping off the lock; a read past a truncated end would be SIGBUS,
    so truncation must not cut the file until the page-in is done."""
    started, release = threading.Event(), threading.Event()

    class Blocking:
        @staticmethod
        def touch(buffer: object, start: int, end: int, stride: int) -> None:
            started.set()
            assert release.wait(10)

    monkeypatch.setattr(page_in, "helper", Blocking)
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(b"x" * 65536)
    try:
        paging = threading.Thread(target=page_in.page_in, args=(records, 0, 65536))
        paging.start()
        assert started.wait(10)
        truncating = threading.Thread(target=records.truncate_to, args=(0,))
        truncating.start()
        truncating.join(0.3)
        assert truncating.is_alive()  # still waiting for the page-in
        assert (tmp_path / "00000000000000000000.log").stat().st_size == 65536
        release.set()
        paging.join(10)
        truncating.join(10)
        assert not truncating.is_alive()
        assert records.size == 0
        assert (tmp_path / "00000000000000000000.log").stat().st_size == 0
    finally:
        release.set()
        records.close()
