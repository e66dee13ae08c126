"""Recovery on a failing disk: only damage found in the data may drop records.

A directory left by a real kill -9 (a child appending plain and transactional batches with
``flush.messages=1``) is opened while every write to one kind of file recovery writes fails
with ENOSPC or EIO: the rebuilt offset and time indexes, the transaction index, producer
snapshots, the checkpoints, the leader-epoch file and the clean-shutdown marker. The open (or
the close after it) either succeeds or fails with KafkaStorageError, the data files are never
cut by it, and once the disk is back every acknowledged record is there, byte for byte. The
same holds on a real full tmpfs (Kafka's LogLoader catches only InvalidOffsetException; an
IOException takes the directory offline instead)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kafkalog import LogManager, Record
from kafkalog.errors import KafkaStorageError
from kafkalog.records import decode_control_key
from kafkalog.server import serve
from recovery_faults_child import value_for
from server_helpers import batch, decode_response, exchange, frame, metadata_request, produce_body

CHILD = Path(__file__).with_name("recovery_faults_child.py")
pytestmark = pytest.mark.one_codec  # files and faults, not the record codec

# every file recovery and a clean close write, by how its name ends (a ".tmp" form included)
ARTEFACTS = [
    ".index",
    ".timeindex",
    ".txnindex",
    ".snapshot",
    "leader-epoch-checkpoint",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    ".kafka_cleanshutdown",
]


def _crashed_directory(target: Path, appends: int) -> dict[int, dict[int, bytes | str]]:
    """Run the child until it kills itself; return what it acknowledged: per partition,
    offset -> value, or the marker kind ("commit"/"abort") at a marker's offset."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, str(CHILD), str(target), str(appends)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    ).stdout
    assert "done" in out, out[-500:]
    acked: dict[int, dict[int, bytes | str]] = {0: {}, 1: {}}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            p, last = int(parts[0]), int(parts[1])
            for offset in range(last - 2, last + 1):
                acked[p][offset] = value_for(p, offset)
        elif len(parts) == 4:
            p, marker, kind, data = int(parts[0]), int(parts[1]), parts[2], int(parts[3])
            acked[p][data] = value_for(p, data)
            acked[p][marker] = kind
    return acked


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, Any]]:
    template = tmp_path_factory.mktemp("crashed") / "logs"
    return template, _crashed_directory(template, 40)


def _data_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.log"))
    }


def check_acknowledged(root: Path, acked: dict[int, dict[int, bytes | str]]) -> None:
    with LogManager(root) as manager:
        for p, expected in acked.items():
            log = manager.get_log("t", p)
            found: dict[int, bytes | str] = {}
            for batch in _batches(log):
                for record in batch:
                    if batch.is_control:
                        kind = decode_control_key(record.key).type.name.lower()
                        found[record.offset] = kind
                    else:
                        found[record.offset] = bytes(record.value or b"")
            missing = {o: v for o, v in expected.items() if found.get(o) != v}
            assert not missing, f"partition {p}: {len(missing)} acknowledged records lost"


def _batches(log: Any) -> Iterator[Any]:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetch = log.read(offset, 1 << 20)
        assert fetch.records is not None
        batches = list(fetch.records.records().batches())
        yield from batches
        offset = batches[-1].next_offset


class FailingWrites:
    """Every write, truncate and sync of a file whose name ends with one of ``suffixes`` (or
    that name with ``.tmp``) fails with ``err``, as a full or failing disk would."""

    def __init__(self, mp: pytest.MonkeyPatch, suffixes: tuple[str, ...], err: int) -> None:
        self.suffixes = suffixes
        self.err = err
        self.fds: set[int] = set()
        self.failed = 0
        real_open, real_close, real_fdopen = os.open, os.close, os.fdopen

        def opening(path: Any, flags: int, *args: Any, **kw: Any) -> int:
            fd = real_open(path, flags, *args, **kw)
            if self._matches(str(path)):
                self.fds.add(fd)
            return fd

        def closing(fd: int) -> None:
            self.fds.discard(fd)
            real_close(fd)

        def fdopen(fd: int, mode: str = "r", *args: Any, **kw: Any) -> Any:
            f = real_fdopen(fd, mode, *args, **kw)
            if fd in self.fds and any(c in mode for c in "wa+"):
                return _FailingFile(f, self)
            return f

        mp.setattr(os, "open", opening)
        mp.setattr(os, "close", closing)
        mp.setattr(os, "fdopen", fdopen)
        for name in ("write", "pwrite", "ftruncate", "fsync", "fdatasync", "posix_fallocate"):
            if hasattr(os, name):
                mp.setattr(os, name, self._wrap(getattr(os, name)))

    def _matches(self, name: str) -> bool:
        name = name.removesuffix(".tmp")
        return name.endswith(self.suffixes)

    def _wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(fd: Any, *args: Any) -> Any:
            if fd in self.fds:
                self.fail()
            return real(fd, *args)

        return call

    def fail(self) -> None:
        self.failed += 1
        raise OSError(self.err, os.strerror(self.err))


class _FailingFile:
    def __init__(self, f: Any, faults: FailingWrites) -> None:
        self._f, self._faults = f, faults

    def write(self, data: Any) -> int:
        self._faults.fail()
        return 0

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("artefact", ARTEFACTS)
def test_a_failing_write_of_a_recovery_artefact_loses_nothing(
    crashed: tuple[Path, dict[int, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    artefact: str,
    err: int,
) -> None:
    template, acked = crashed
    root = tmp_path / "logs"
    shutil.copytree(template, root)
    before = _data_hashes(root)
    outcome = "opened"
    with monkeypatch.context() as mp:
        faults = FailingWrites(mp, (artefact,), err)
        try:
            manager = LogManager(root)
        except KafkaStorageError:
            outcome = "refused"
        else:
            try:
                manager.close()
            except KafkaStorageError:
                outcome = "close failed"
    if outcome == "refused":
        assert _data_hashes(root) == before, "a failed open changed a data file"
    assert faults.failed, f"no write to a {artefact} file was tried: the test tests nothing"
    check_acknowledged(root, acked)
    with LogManager(root) as manager:  # the clean close after it is clean
        assert manager.topics() == {"t": 2}


def test_every_fault_reaches_the_caller_typed(
    crashed: tuple[Path, dict[int, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots and indexes rebuilt by recovery: their failure must end the open (the bug
    was a caught error that emptied the segment instead)."""
    template, acked = crashed
    root = tmp_path / "logs"
    shutil.copytree(template, root)
    before = _data_hashes(root)
    with monkeypatch.context() as mp:
        FailingWrites(mp, (".snapshot",), errno.ENOSPC)
        with pytest.raises(KafkaStorageError, match="No space left"):
            LogManager(root)
    assert _data_hashes(root) == before
    check_acknowledged(root, acked)


# --- a real full disk ----------------------------------------------------------------------


@contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> Path:
    """Fill the file system holding ``path`` to the last byte; return the filler file."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_recovery_on_a_real_full_disk_fails_typed_and_keeps_every_record(
    crashed: tuple[Path, dict[int, Any]], tmp_path: Path
) -> None:
    template, acked = crashed
    with small_tmpfs(tmp_path / "mnt", "16m") as mnt:
        root = mnt / "logs"
        # sparse, as the preallocated indexes are: a dense copy would not fit
        subprocess.run(["cp", "-a", "--sparse=always", str(template), str(root)], check=True)
        before = _data_hashes(root)
        filler = fill(mnt)
        with pytest.raises(KafkaStorageError, match="No space left"):
            LogManager(root)
        assert _data_hashes(root) == before
        filler.unlink()
        check_acknowledged(root, acked)


def test_serve_takes_a_full_directory_offline_and_serves_the_others(
    crashed: tuple[Path, dict[int, Any]], tmp_path: Path
) -> None:
    """Kafka's answer to a log directory that fails while loading: that directory goes offline
    (its partitions answer KAFKA_STORAGE_ERROR, Metadata shows no leader), the rest serve."""
    template, acked = crashed
    healthy = tmp_path / "healthy"
    with LogManager(healthy) as manager:
        manager.create_topic("a", 1)
    with small_tmpfs(tmp_path / "mnt", "16m") as mnt:
        full = mnt / "logs"
        subprocess.run(["cp", "-a", "--sparse=always", str(template), str(full)], check=True)
        before = _data_hashes(full)
        filler = fill(mnt)
        with serve([healthy, full]) as server:
            port = int(server.bootstrap_servers.rsplit(":", 1)[1])
            record = batch([Record(b"kept")])
            for topic, code in (("a", 0), ("t", 56)):  # 56: KAFKA_STORAGE_ERROR
                data = exchange(port, frame(0, 9, produce_body(9, topic, 0, record)))
                answer = decode_response(0, 9, data, header_v1=True)
                assert answer.responses[0].partition_responses[0].error_code == code, topic
            data = exchange(port, frame(3, 12, metadata_request(12, ["t"])))
            meta = decode_response(3, 12, data, header_v1=True).topics[0]
            assert [p.error_code for p in meta.partitions] == [5, 5]  # LEADER_NOT_AVAILABLE
            assert [p.leader_id for p in meta.partitions] == [-1, -1]
        assert _data_hashes(full) == before
        filler.unlink()
        check_acknowledged(full, acked)
    with LogManager(healthy) as manager:
        assert manager.get_log("a").log_end_offset == 1


def test_serve_on_a_disk_that_fills_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """End to end: producers write through ``kafkalog serve`` until its disk is full (those
    writes fail, typed), the server is killed -9, a restart on the still-full disk refuses
    to serve the directory, and once there is room every acknowledged record is back."""
    confluent = pytest.importorskip("confluent_kafka")
    from kafka_oracle import free_port
    from test_server_transactions import _start_cli_server

    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        data = mnt / "logs"
        with LogManager(data) as manager:
            manager.create_topic("t", 2, {"segment.bytes": "1048576"})
        port = free_port()
        server = _start_cli_server(data, port)
        acked: list[tuple[int, int, bytes]] = []
        failed: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                failed.append(err.name())

        producer = confluent.Producer(
            {"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": 2,
             "message.timeout.ms": 5000, "retries": 0}
        )  # fmt: skip
        try:
            for i in range(40_000):
                producer.produce("t", b"%06d" % i + b"x" * 400, partition=i % 2,
                                 on_delivery=on_delivery)  # fmt: skip
                producer.poll(0)
                if failed:
                    break
            producer.flush(30)
        finally:
            server.kill()
            server.wait(30)
        assert failed, "the disk never filled"
        assert "KAFKA_STORAGE_ERROR" in failed
        # the disk full to the last byte: a restart recovers without writing, or refuses the
        # directory (and then changes no byte of it); either way nothing is lost
        filler = fill(mnt)
        before = _data_hashes(data)
        restarted = subprocess.Popen(
            [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(data),
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert restarted.stderr is not None
        log_lines = []
        for line in restarted.stderr:
            log_lines.append(line)
            if "kafkalog serve started" in line:
                restarted.send_signal(signal.SIGTERM)
        restarted.wait(60)
        if restarted.returncode != 0:
            assert "offline" in "".join(log_lines), "".join(log_lines)[-2000:]
            assert _data_hashes(data) == before
        # room again: the file system grows, as an operator would free or add space
        subprocess.run(["mount", "-o", "remount,size=32m", str(mnt)], check=True)
        filler.unlink()
        with LogManager(data) as manager:
            for partition, offset, value in acked:
                log = manager.get_log("t", partition)
                got = next(iter(log.read_records(offset, 1 << 16)))
                assert (got.offset, bytes(got.value or b"")) == (offset, value)
        outcome = "refused the directory" if restarted.returncode else "recovered and served"
        print(
            f"{len(acked)} records acknowledged, 0 lost; {len(failed)} writes refused; "
            f"the restart on the full disk {outcome}"
        )
