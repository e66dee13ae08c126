"""A partition's remote segments are folded from their events as Kafka's RemoteLogMetadataCache
folds them: which segment holds an offset of an epoch, how far each epoch reaches, what is
listed, what is dropped and what is refused, the same as Kafka 4.3.1's own class on seeded
random histories."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, TOOL_LOG, classpath
from kafkalog.errors import InvalidArgumentError, RemoteResourceNotFoundError
from kafkalog.records.remote_log_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from kafkalog.tiered.metadata_cache import RemoteLogMetadataCache
from kafkalog.types import uuid_string

pytestmark = pytest.mark.one_codec  # no records are decoded: the codec is not involved

ROOT = Path(__file__).resolve().parent.parent
TP = TopicIdPartition("3JPMkBTsTzGbV7ZVXmQGrg", "t", 0)
S = RemoteLogSegmentState


def _sid(n: int) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(TP, uuid_string(n.to_bytes(16, "big")))


def _segment(n: int, start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    pairs = tuple(sorted(epochs.items()))
    return RemoteLogSegmentMetadata(_sid(n), start, end, -1, 0, 0, 100, pairs)


def _to(n: int, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(_sid(n), 1, state, 0)


def test_a_copy_is_found_only_once_finished_and_until_its_deletion_starts() -> None:
    cache = RemoteLogMetadataCache()
    cache.add_copy_in_progress_segment(_segment(1, 0, 99, {0: 0, 1: 50}))
    assert cache.segment_for(0, 10) is None  # a copy in progress is never read
    cache.update(_to(1, S.COPY_SEGMENT_FINISHED))
    found = cache.segment_for(0, 10)
    assert found is not None and found.state is S.COPY_SEGMENT_FINISHED
    assert cache.segment_for(0, 50) is None  # offset 50 is epoch 1's
    assert cache.segment_for(1, 99) is not None and cache.segment_for(1, 100) is None
    assert cache.highest_offset_for_epoch(0) == 49 and cache.highest_offset_for_epoch(1) == 99
    cache.update(_to(1, S.DELETE_SEGMENT_STARTED))
    assert cache.segment_for(0, 10) is None
    assert [m.segment_id for m in cache.segments_for_epoch(0)] == [_sid(1)]
    cache.update(_to(1, S.DELETE_SEGMENT_FINISHED))
    assert cache.segments_for_epoch(0) == [] and list(cache) == []


def test_a_later_copy_over_the_same_range_replaces_the_earlier_one() -> None:
    cache = RemoteLogMetadataCache()
    for n, (start, end) in enumerate([(0, 99), (100, 199), (50, 199)], 1):
        cache.add_copy_in_progress_segment(_segment(n, start, end, {0: start}))
        cache.update(_to(n, S.COPY_SEGMENT_FINISHED))
    assert cache.segment_for(0, 150).segment_id == _sid(3)  # type: ignore[union-attr]
    assert cache.segment_for(0, 10).segment_id == _sid(1)  # type: ignore[union-attr]
    # the replaced one is still listed (its deletion is retention's business)
    assert [m.segment_id for m in cache.segments_for_epoch(0)] == [_sid(1), _sid(3), _sid(2)]


def test_events_against_the_rules_are_dropped_or_refused() -> None:
    cache = RemoteLogMetadataCache(initialized=False)
    cache.update(_to(9, S.COPY_SEGMENT_FINISHED))  # its first event was cleaned up already
    cache.mark_initialized()
    with pytest.raises(RemoteResourceNotFoundError):
        cache.update(_to(9, S.COPY_SEGMENT_FINISHED))
    cache.add_copy_in_progress_segment(_segment(1, 0, 9, {0: 0}))
    cache.update(_to(1, S.DELETE_SEGMENT_FINISHED))  # not from COPY_SEGMENT_STARTED: dropped
    assert cache.dropped == 1 and cache.segments[_sid(1)].state is S.COPY_SEGMENT_STARTED
    with pytest.raises(InvalidArgumentError):
        cache.update(_to(1, S.COPY_SEGMENT_STARTED))
    finished = _segment(2, 0, 9, {0: 0})
    with pytest.raises(InvalidArgumentError):
        cache.add_copy_in_progress_segment(
            RemoteLogSegmentMetadata(**{**finished.__dict__, "state": S.COPY_SEGMENT_FINISHED})
        )


# --- against Kafka 4.3.1's RemoteLogMetadataCache -----------------------------------------------


def _history(rng: random.Random) -> list[str]:
    """A seeded random history of one partition's events and questions, in the oracle's
    language: overlapping copies across a few epochs, updates in and out of order (some to
    segments never seen), and questions between them."""
    ops = [] if rng.random() < 0.2 else ["I"]
    made: list[int] = []
    for _ in range(rng.randrange(20, 80)):
        roll = rng.random()
        if roll < 0.25 or not made:
            n = rng.randrange(1, 12)
            start = rng.randrange(0, 300)
            end = start + rng.randrange(0, 150)
            epochs = {rng.randrange(0, 2): start}
            for _ in range(rng.randrange(0, 3)):
                epochs[rng.randrange(0, 5)] = rng.randrange(start, end + 1)
            pairs = ",".join(f"{e}:{o}" for e, o in sorted(epochs.items()))
            ops.append(f"A {_sid(n).id} {start} {end} {pairs} {str(rng.random() < 0.6).lower()}")
            made.append(n)
        elif roll < 0.55:
            n = rng.choice(made) if rng.random() < 0.9 else rng.randrange(12, 15)
            state = rng.choices(list(S), weights=[1, 6, 3, 2])[0]
            ops.append(f"U {_sid(n).id} {int(state)} {rng.randrange(0, 99)} {rng.randrange(0, 3)}")
        elif roll < 0.75:
            ops.append(f"{rng.choice('QX')} {rng.randrange(0, 5)} {rng.randrange(0, 560)}")
        elif roll < 0.85:
            ops.append(f"H {rng.randrange(0, 5)}")
        elif roll < 0.95:
            ops.append(f"L {rng.randrange(0, 5)}")
        else:
            ops.append("S")
    return ops


def _ours(cache: RemoteLogMetadataCache, op: str) -> str:
    """One operation of the oracle's language on kafkalog's cache, answered as it answers."""
    f = op.split(" ")
    tp_id = TP.topic_id
    try:
        if f[0] == "I":
            cache.mark_initialized()
        elif f[0] == "A":
            epochs = tuple(
                sorted((int(e), int(o)) for e, o in (p.split(":") for p in f[4].split(",")))
            )
            cache.add_copy_in_progress_segment(
                RemoteLogSegmentMetadata(
                    RemoteLogSegmentId(TP, f[1]),
                    int(f[2]),
                    int(f[3]),
                    -1,
                    0,
                    0,
                    100,
                    epochs,
                    txn_index_empty=f[5] == "true",
                )
            )
        elif f[0] == "U":
            cache.update(
                RemoteLogSegmentMetadataUpdate(
                    RemoteLogSegmentId(TopicIdPartition(tp_id, "t", 0), f[1]),
                    int(f[3]),
                    S(int(f[2])),
                    int(f[4]),
                )
            )
        elif f[0] in "QX":
            ask = cache.segment_for if f[0] == "Q" else cache.next_segment_with_txn_index
            found = ask(int(f[1]), int(f[2]))
            return "-" if found is None else found.segment_id.id
        elif f[0] == "H":
            highest = cache.highest_offset_for_epoch(int(f[1]))
            return "-" if highest is None else str(highest)
        elif f[0] == "L":
            return ",".join(
                f"{m.segment_id.id}@{m.start_offset}" for m in cache.segments_for_epoch(int(f[1]))
            )
        else:
            return ",".join(sorted(f"{m.segment_id.id}:{int(m.state)}" for m in cache))
    except InvalidArgumentError:
        return "ERR IllegalArgumentException"
    except RemoteResourceNotFoundError:
        return "ERR RemoteResourceNotFoundException"
    return "ok"


def _same_listing(ours: str, kafka: str) -> bool:
    """Kafka sorts an epoch's listing by start offset from a hash set: among segments of the
    same start offset its order is the set's, so those compare as sets."""

    def groups(text: str) -> list[tuple[str, frozenset[str]]]:
        out: dict[str, set[str]] = {}
        for item in filter(None, text.split(",")):
            out.setdefault(item.split("@")[1], set()).add(item)
        return [(start, frozenset(ids)) for start, ids in out.items()]

    if ours.startswith("ERR") or kafka.startswith("ERR"):
        return ours == kafka
    return groups(ours) == groups(kafka)


@pytest.mark.kafka
def test_histories_fold_as_kafkas_cache_folds_them() -> None:
    """300 seeded histories, each answered question by question by Kafka 4.3.1's cache and
    ours."""
    rng = random.Random(1405)
    histories = [_history(rng) for _ in range(300)]
    program = str(ROOT / "interop" / "RemoteLogMetadataCacheOracle.java")
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(KAFKA_VERSIONS[-1]), program]
    text = "\n".join("".join(f"{op}\n" for op in ops) for ops in histories)
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = iter(proc.stdout.splitlines())
    asked = 0
    for ops in histories:
        cache = RemoteLogMetadataCache(initialized=False)
        for i, op in enumerate(ops):
            kafka, ours = next(answers), _ours(cache, op)
            same = _same_listing(ours, kafka) if op.startswith("L") else ours == kafka
            assert same, (ops[: i + 1], kafka, ours)
            asked += op[0] in "QXHLS"
    assert next(answers, None) is None
    assert asked > 3000
