"""A concurrent model test in the spirit of Redpanda's opfuzz: threads append, roll, flush,
truncate, move the log start, compact (swaps) and reopen one Log while reader threads read at
random offsets (the log end included) and look up timestamps. Seeded and bounded.

Checks: no thread ever gets an error that is not the documented answer to its call; every record
a reader saw at an offset is one that was acknowledged at that offset; and, after a final reopen,
the log holds exactly what the model says.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from kafkalog import (
    LogClosedError,
    LogConfig,
    LogManager,
    ManualClock,
    OffsetOutOfRangeError,
    Record,
)

OPS_PER_THREAD = 120


class Model:
    """What was acknowledged: offset -> value now, and every value ever acknowledged there."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held across each mutating call and its model update
        self.current: dict[int, bytes] = {}
        self.ever: dict[int, set[bytes]] = {}
        self.start = 0

    def appended(self, first: int, values: list[bytes]) -> None:
        for i, v in enumerate(values):
            self.current[first + i] = v
            self.ever.setdefault(first + i, set()).add(v)

    def truncated(self, offset: int) -> None:
        self.current = {o: v for o, v in self.current.items() if o < offset}
        self.start = min(self.start, offset)

    def started_at(self, offset: int) -> None:
        self.start = max(self.start, offset)
        self.current = {o: v for o, v in self.current.items() if o >= self.start}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_operations_against_a_model(
    tmp_path: Path, fast_switching: None, seed: int
) -> None:
    clock = ManualClock(1_000_000)
    props = {
        "internal.segment.bytes": "2048",
        "cleanup.policy": "compact,delete",
        "min.cleanable.dirty.ratio": "0.01",
        "file.delete.delay.ms": "0",
        "retention.ms": "-1",
    }
    manager = LogManager(tmp_path, LogConfig.from_properties(props), clock)
    holder = {"log": manager.create_topic("t", 1)[0]}
    model = Model()
    problems: list[BaseException] = []
    observed: list[tuple[int, bytes]] = []
    counter = iter(range(10**9))

    def appender(rng: random.Random, name: str) -> None:
        for _ in range(OPS_PER_THREAD):
            n = rng.randint(1, 4)
            values = [b"%s-%d" % (name.encode(), next(counter)) for _ in range(n)]
            recs = [Record(v, key=v, timestamp=clock.milliseconds()) for v in values]
            with model.lock:
                info = holder["log"].append(recs)
                model.appended(info.first_offset, values)

    def mutator(rng: random.Random) -> None:
        for _ in range(OPS_PER_THREAD // 3):
            op = rng.choice(["roll", "flush", "truncate", "start", "compact", "reopen"])
            with model.lock:
                log = holder["log"]
                if op == "roll":
                    log.roll()
                elif op == "flush":
                    log.flush()
                elif op == "truncate" and log.log_end_offset > log.log_start_offset:
                    to = rng.randint(log.log_start_offset, log.log_end_offset)
                    manager.truncate_to("t", 0, to)
                    model.truncated(log.log_end_offset)  # batch-granular: maybe below ``to``
                elif op == "start" and log.high_watermark > log.log_start_offset:
                    to = rng.randint(log.log_start_offset, log.high_watermark)
                    log.maybe_increment_log_start_offset(to)
                    log.delete_old_segments()
                    model.started_at(to)
                elif op == "compact":
                    log.roll()
                    manager.run_cleaner()  # unique keys: a swap that keeps every record
            clock.advance(10)

    writers_done = threading.Event()

    def reader(rng: random.Random) -> None:
        # Until the writers finish (and at least a fixed number of reads): a reader that ran
        # ahead of every append would otherwise check nothing (it happened on a loaded CI VM).
        reads = 0
        while reads < OPS_PER_THREAD * 2 or not writers_done.is_set():
            reads += 1
            log = holder["log"]
            try:
                end = log.log_end_offset
                start = log.log_start_offset  # two reads: a truncation may move both between
                offset = rng.choice([end, rng.randint(min(start, end), max(start, end))])
                for rec in log.read_records(offset, rng.choice([100, 1000, 1 << 20])):
                    observed.append((rec.offset, bytes(rec.value or b"")))
                log.offset_for_timestamp(rng.randint(0, clock.milliseconds()))
                log.list_offsets(-3)
            except OffsetOutOfRangeError:
                continue  # the start or end moved between reading it and using it
            except LogClosedError:
                if holder["log"] is log:
                    raise

    def guard(target: object, *args: object) -> threading.Thread:
        def run() -> None:
            try:
                target(*args)  # type: ignore[operator]
            except BaseException as err:
                problems.append(err)

        return threading.Thread(target=run)

    rng = random.Random(seed)
    threads = [
        guard(appender, random.Random(rng.random()), "a"),
        guard(appender, random.Random(rng.random()), "b"),
        guard(mutator, random.Random(rng.random())),
        guard(reader, random.Random(rng.random())),
        guard(reader, random.Random(rng.random())),
    ]
    for t in threads:
        t.start()
    try:
        for i, t in enumerate(threads):
            t.join(120)
            assert not t.is_alive(), "a thread hung"
            if i == 2:  # the two appenders and the mutator are done
                writers_done.set()
    finally:
        writers_done.set()  # never leave a reader spinning
    assert problems == [], problems[:3]
    for offset, value in observed:
        assert value in model.ever.get(offset, set()), (offset, value)
    manager.close()
    with LogManager(tmp_path, LogConfig.from_properties(props), clock) as again:
        log = again.get_log("t")
        got: dict[int, bytes] = {}
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            recs = log.read_records(offset, 1 << 20)
            if not recs:
                break
            got.update((r.offset, bytes(r.value or b"")) for r in recs)
            offset = recs[-1].offset + 1
        assert got == {o: v for o, v in model.current.items() if o >= log.log_start_offset}
        assert len(observed) > 0
