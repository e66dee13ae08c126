"""The read-side commands beside a writer in another process: ``topics --list``/``--describe``
and ``verify`` take no lock and report no false problem while segments roll, indexes grow and
retention deletes segments under them (issue: verify once reported 22 false index problems on
a live log, and describe failed on the held lock)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli.main import cli

pytestmark = pytest.mark.one_codec  # the commands' own behaviour beside a writer


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def writer_script() -> str:
    return textwrap.dedent(
        """
        import sys, threading
        from kafkalog import LogManager, Record
        config = {"internal.segment.bytes": "20000", "index.interval.bytes": "100",
                  "retention.bytes": "60000", "file.delete.delay.ms": "0"}
        stop = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        with LogManager([sys.argv[1]]) as manager:
            manager.create_topic("live", 2, config)
            print("ready", flush=True)
            i = 0
            while not stop.is_set():
                for p in range(2):
                    records = [Record(b"v" * 100, b"k%d" % (i * 10 + j)) for j in range(10)]
                    manager.get_log("live", p).append(records)
                i += 1
                if i % 50 == 0:
                    manager.run_retention()
        """
    )


def test_describe_list_and_verify_beside_a_writer(tmp_path: Path) -> None:
    data = tmp_path / "data"
    writer = subprocess.Popen(
        [sys.executable, "-c", writer_script(), str(data)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        ends = {0: 0, 1: 0}
        rounds_with_retention = 0
        for _ in range(15):
            code, out, err = run("topics", "--log-dirs", str(data), "--list")
            assert (code, out) == (0, "live\n"), err
            code, out, err = run("topics", "--log-dirs", str(data), "--describe")
            assert code == 0, err
            for p, start, end in re.findall(
                r"Partition: (\d)\t.*LogStartOffset: (\d+)\tLogEndOffset: (\d+)", out
            ):
                assert int(start) <= int(end) and int(end) >= ends[int(p)]
                ends[int(p)] = int(end)
                rounds_with_retention += int(start) > 0
            code, out, err = run("verify", "--log-dirs", str(data))
            assert code == 0 and out.endswith(": 0 problem(s)\n"), out + err
        assert min(ends.values()) > 0 and rounds_with_retention > 0  # it did move under us
    finally:
        writer.communicate("", timeout=60)
    assert writer.returncode == 0


def test_held_by_writer_reads_the_lock_table_without_taking_the_lock(tmp_path: Path) -> None:
    from kafkalog import Log, LogManager
    from kafkalog.storage.dir_lock import held_by_writer

    assert not held_by_writer(tmp_path)  # no .lock at all
    with LogManager([tmp_path]) as manager:
        manager.create_topic("t", 1)
        assert held_by_writer(tmp_path)  # its partitions' writer: the log directory's lock
    assert not held_by_writer(tmp_path) and not held_by_writer(tmp_path / "t-0")
    with Log.open(tmp_path / "t-0"):  # on its own: its partition directory's lock
        assert held_by_writer(tmp_path / "t-0") and not held_by_writer(tmp_path)
    assert not held_by_writer(tmp_path / "t-0")


def test_verify_beside_a_writer_waits_for_a_batch_caught_half_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a preallocated active segment a batch being written lies inside the file's size:
    verify, beside the writer holding the directory, catches it half copied and waits for it
    to land rather than report damage. (The copy lands during verify's first wait.)"""
    import os
    import time

    from kafkalog import LogManager, MemoryRecords, Record
    from kafkalog.log import view
    from kafkalog.storage import filenames as fn

    with LogManager([tmp_path]) as manager:
        manager.create_topic("t", 1, {"preallocate": "true"})
        log = manager.get_log("t", 0)
        log.append([Record(b"a" * 50, timestamp=0)])
        start = log.size_in_bytes
        batch = bytes(MemoryRecords.build([Record(b"b" * 50, timestamp=0)], base_offset=1))
        fd = os.open(fn.log_file(tmp_path / "t-0", 0), os.O_WRONLY)
        try:
            os.pwrite(fd, batch[: len(batch) // 2], start)  # the writer's copy, half done

            def copy_lands_meanwhile(seconds: float) -> None:
                os.pwrite(fd, batch, start)
                real_sleep(seconds)

            real_sleep = time.sleep
            monkeypatch.setattr(view.time, "sleep", copy_lands_meanwhile)
            code, out, err = run("verify", "--log-dirs", str(tmp_path))
        finally:
            os.close(fd)
    assert (code, out) == (0, "checked 1 segment(s), 2 batch(es): 0 problem(s)\n"), out + err
