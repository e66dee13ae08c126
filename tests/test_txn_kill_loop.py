"""Live librdkafka transactional producers while ``kafkalog serve`` is killed -9 and restarted
over and over: none of them is ever fenced (no INVALID_PRODUCER_EPOCH, PRODUCER_FENCED or
other fatal error: a live producer's epoch survives every restart, as with Kafka's coordinator),
and read_committed readers see each committed transaction's records once and nothing of an
aborted one. ``KAFKALOG_TXN_KILLS`` sets the number of kills (``make fault-loops`` runs 100)."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafka_oracle import free_port
from kafkalog import LogManager
from kafkalog.log.view import PartitionView
from kafkalog.records.committed import committed_batches_in_one_pass

pytestmark = [pytest.mark.one_codec, pytest.mark.slow, pytest.mark.timeout(3600)]

KILLS = int(os.environ.get("KAFKALOG_TXN_KILLS", "6"))
PRODUCERS, PARTITIONS, PER_TXN = 3, 3, 5


def _start(log_dir: Path, port: int, out: Path) -> subprocess.Popen[bytes]:
    with out.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(log_dir),
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc


class Outcomes:
    """What the producers know: the transactions committed and aborted, and every error."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed: set[str] = set()
        self.aborted: set[str] = set()
        self.errors: collections.Counter[str] = collections.Counter()
        self.fatal: list[str] = []


def _produce(n: int, bootstrap: str, stop: threading.Event, seen: Outcomes) -> None:
    from confluent_kafka import KafkaException, Producer

    rng = random.Random(n)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{n}",
                         "linger.ms": 5, "reconnect.backoff.max.ms": 200,
                         "message.timeout.ms": 60000})  # fmt: skip

    def settle(call: object, what: str) -> str:
        """Run ``call`` until it succeeds ('ok'), or the transaction must be aborted."""
        while True:
            try:
                call()  # type: ignore[operator]
                return "ok"
            except KafkaException as exc:
                err = exc.args[0]
                with seen.lock:
                    seen.errors[f"{what}: {err.name()}"] += 1
                    if err.fatal():
                        seen.fatal.append(f"{what}: {err.name()}: {err.str()}")
                if err.fatal():
                    return "fatal"
                if err.txn_requires_abort():
                    return "abort"
                time.sleep(0.05)  # retriable: the same call again, as librdkafka asks

    if settle(lambda: producer.init_transactions(30), "init") != "ok":
        return
    txn = 0
    while not stop.is_set():
        name = f"{n}-{txn}"
        if settle(producer.begin_transaction, "begin") != "ok":
            return
        for k in range(PER_TXN):
            producer.produce("t", f"{name}-{k}".encode(), partition=k % PARTITIONS)
            producer.poll(0)
            time.sleep(rng.uniform(0, 0.05))
        outcome = settle(lambda: producer.commit_transaction(30), "commit")
        if outcome == "abort":
            outcome = "aborted" if settle(lambda: producer.abort_transaction(30), "abort") == "ok" \
                else "fatal"  # fmt: skip
        with seen.lock:
            if outcome == "ok":
                seen.committed.add(name)
            elif outcome == "aborted":
                seen.aborted.add(name)
        if outcome == "fatal":
            return
        txn += 1


def _commits(seen: Outcomes, n: int) -> int:
    with seen.lock:
        return sum(1 for name in seen.committed if name.startswith(f"{n}-"))


def test_live_transactional_producers_survive_every_kill_unfenced(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager([data]) as manager:
        manager.create_topic("t", PARTITIONS)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    out = tmp_path / "serve.log"
    server = _start(data, port, out)
    rng = random.Random(20261127)
    stop = threading.Event()
    seen = Outcomes()
    threads = [
        threading.Thread(target=_produce, args=(n, bootstrap, stop, seen), daemon=True)
        for n in range(PRODUCERS)
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(KILLS):
            # every kill meets live producers: each has committed since the last restart
            before = {n: _commits(seen, n) for n in range(PRODUCERS)}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                _commits(seen, n) <= before[n] for n in range(PRODUCERS)
            ):
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 1.0))  # inside a transaction, a commit, or between
            os.kill(server.pid, signal.SIGKILL)
            server.wait()
            time.sleep(rng.uniform(0, 0.5))
            server = _start(data, port, out)
        time.sleep(5)  # the producers finish what the last restart interrupted
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    print(f"{KILLS} kills: {len(seen.committed)} committed, {len(seen.aborted)} aborted, "
          f"errors {dict(seen.errors)}")  # fmt: skip
    assert not seen.fatal, f"a live producer was fenced: {seen.fatal}"
    assert len(seen.committed) >= PRODUCERS, "the producers committed almost nothing"
    visible: collections.Counter[str] = collections.Counter()
    for p in range(PARTITIONS):  # what a read_committed reader of the files gets
        view = PartitionView(data / f"t-{p}")
        end = view.last_stable_offset()
        for batch in committed_batches_in_one_pass(view.batches(0), end, view.batches):
            for record in batch:
                assert record.value is not None
                visible[record.value.decode().rsplit("-", 1)[0]] += 1
    assert {t for t, c in visible.items() if c != PER_TXN} == set(), "a record lost or doubled"
    assert set(visible) >= seen.committed
    assert not set(visible) & seen.aborted, "an aborted transaction is visible"
