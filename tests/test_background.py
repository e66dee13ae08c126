"""The background worker (CRC checks, page-in ahead) and paging a mapped segment in."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from kafkalog.storage import page_in
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
            if page_in.populate_read is None:
                pytest.skip("this kernel cannot populate page tables on request")
            assert done
            job = records.page_in_ahead(0, 1 << 20)
            assert job is not None
            job.wait()
            assert bytes(view) == data
        assert not records.page_in(10, 10)  # an empty range
    finally:
        records.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_page_in_works_with_and_without_the_gil_free_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    if compiled and page_in.helper is None:
        pytest.skip("the _pagein extension is not built")
    if page_in.populate_read is None:
        pytest.skip("this kernel cannot populate page tables on request")
    if not compiled:
        monkeypatch.setattr(page_in, "helper", None)  # mmap.madvise, under the GIL
    data = bytes(range(256)) * 64
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(data)
    try:
        with records.mapped() as view:
            assert records.page_in(100, len(data))
            assert bytes(view) == data
    finally:
        records.close()


def test_the_helper_says_what_the_kernel_refused() -> None:
    helper = page_in.helper
    if helper is None:
        pytest.skip("the _pagein extension is not built")
    buffer = bytearray(1 << 16)
    helper.madvise(buffer, 10, 10, 0)  # an empty range: nothing asked
    helper.madvise(buffer, 0, 1 << 20, 0)  # clipped to the buffer; MADV_NORMAL is harmless
    with pytest.raises(OSError) as refused:
        helper.madvise(buffer, 0, len(buffer), 12345)  # no such advice
    assert refused.value.errno == errno.EINVAL


def test_a_kernel_without_populate_read_stops_being_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if page_in.populate_read is None:
        pytest.skip("this kernel cannot populate page tables on request")

    def refuse(*args: object) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    class Refusing:
        madvise = staticmethod(refuse)

    monkeypatch.setattr(page_in, "helper", Refusing)
    monkeypatch.setattr(page_in, "populate_read", page_in.populate_read)
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(b"x" * 8192)
    try:
        with records.mapped():
            assert not records.page_in(0, 8192)
            assert page_in.populate_read is None
            assert records.page_in_ahead(0, 8192) is None  # not asked again
    finally:
        records.close()
