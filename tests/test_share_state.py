"""Share-partitions' state in ``__share_group_state`` (KIP-932): the merge of state batches
against Kafka's own PersisterStateBatchCombiner on seeded random cases, the ShareSnapshot and
ShareUpdate records against bytes Kafka's generated classes write, the replay rules
(a snapshot replaces, an update merges, a tombstone removes), and the replay of what Kafka
4.3.1's KafkaShareConsumer left in a real broker's directory."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, ROOT, TOOL_LOG, classpath
from kafka_scenarios import BrokerWritten
from kafkalog import LogManager
from kafkalog.coordinator.share_partition import SharePartition
from kafkalog.coordinator.share_state import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    ShareGroupOffset,
    StateBatch,
    combine_state_batches,
    load_share_state,
    replay,
    snapshot_record,
    update_record,
)
from kafkalog.storage.partition_metadata import read_partition_metadata

B = StateBatch
KEY = ("g", "u7bjN-yhSqa575FPHZaPPg", 3)


def test_a_later_batch_wins_by_delivery_count_then_state() -> None:
    assert combine_state_batches([B(0, 9, AVAILABLE, 1)], [B(3, 5, ACKNOWLEDGED, 1)], -1) == [
        B(0, 2, AVAILABLE, 1), B(3, 5, ACKNOWLEDGED, 1), B(6, 9, AVAILABLE, 1),
    ]  # fmt: skip
    # a redelivered record's count is higher: its older ACKNOWLEDGED twin does not win back
    assert combine_state_batches([B(0, 3, ACKNOWLEDGED, 1)], [B(2, 2, AVAILABLE, 2)], -1) == [
        B(0, 1, ACKNOWLEDGED, 1), B(2, 2, AVAILABLE, 2), B(3, 3, ACKNOWLEDGED, 1),
    ]  # fmt: skip
    # below the start offset nothing is kept; neighbours alike are one batch
    assert combine_state_batches(
        [B(0, 4, ARCHIVED, 1), B(5, 6, ACKNOWLEDGED, 1)], [B(7, 9, ACKNOWLEDGED, 1)], 3
    ) == [B(3, 4, ARCHIVED, 1), B(5, 9, ACKNOWLEDGED, 1)]
    assert combine_state_batches([], [], 0) == []


def _random_batches(rng: random.Random, start: int) -> list[StateBatch]:
    """Non-overlapping batches from about ``start``, as one write of Kafka's carries."""
    out, offset = [], start + rng.randrange(0, 4)
    for _ in range(rng.randrange(0, 5)):
        last = offset + rng.randrange(0, 6)
        out.append(B(offset, last, rng.choice((AVAILABLE, ACKNOWLEDGED, ARCHIVED)),
                     rng.randrange(1, 4)))  # fmt: skip
        offset = last + 1 + rng.randrange(0, 3)
    return out


def _field(batches: list[StateBatch]) -> str:
    return ";".join(f"{b.first_offset},{b.last_offset},{b.delivery_state},{b.delivery_count}"
                    for b in batches)  # fmt: skip


@pytest.mark.kafka
def test_the_merge_is_kafkas_on_random_cases() -> None:
    """400 seeded cases through Kafka 4.3.1's PersisterStateBatchCombiner and ours."""
    rng = random.Random(932)
    cases = []
    for _ in range(400):
        start = rng.choice((-1, rng.randrange(0, 12)))
        so_far = combine_state_batches([], _random_batches(rng, 0), -1)  # a state Kafka left
        cases.append((start, so_far, _random_batches(rng, rng.randrange(0, 10))))
    program = str(ROOT / "interop" / "StateBatchCombiner.java")
    cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(KAFKA_VERSIONS[-1]), program]
    text = "".join(f"{s}|{_field(a)}|{_field(b)}\n" for s, a, b in cases)
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = proc.stdout.splitlines()
    assert len(theirs) == len(cases)
    for (start, so_far, new), kafka in zip(cases, theirs, strict=True):
        assert _field(combine_state_batches(so_far, new, start)) == kafka, (start, so_far, new)


def test_records_are_the_bytes_kafkas_generated_classes_write() -> None:
    """Vectors from Kafka 4.3.1's ShareSnapshotKey/Value and ShareUpdateKey/Value, serialized
    with MessageUtil.toCoordinatorTypePrefixedBytes / toVersionPrefixedBytes."""
    state = ShareGroupOffset(1, 2, 3, 10, 4, 111, 222, [B(10, 12, 2, 1), B(13, 13, 0, 3)])
    key, value = snapshot_record(KEY, state)
    assert key.hex() == "0000000167bbb6e337eca14aa6b9ef914f1d968f3e00000003"
    assert value.hex() == (
        "0000000000010000000200000003000000000000000a000000000000006f00000000000000de030000"
        "00000000000a000000000000000c02000100000000000000000d000000000000000d00000300010004"
        "00000004"
    )
    key, value = update_record(KEY, 1, 3, -1, -1, [B(14, 20, 4, 5)])
    assert key.hex() == "0001000167bbb6e337eca14aa6b9ef914f1d968f3e00000003"
    assert value.hex() == (
        "00000000000100000003ffffffffffffffff02000000000000000e00000000000000140400050000"
    )


def test_a_snapshot_replaces_an_update_merges_a_tombstone_removes() -> None:
    state: dict[tuple[str, str, int], ShareGroupOffset] = {}
    first = ShareGroupOffset(0, 1, 0, 0, -1, 5, 5, [B(0, 9, AVAILABLE, 1)])
    replay(state, *snapshot_record(KEY, first))
    replay(state, *update_record(KEY, 0, -1, -1, 2, [B(0, 1, ACKNOWLEDGED, 1)]))
    assert state[KEY].start_offset == 0 and state[KEY].leader_epoch == 0  # -1: unchanged
    assert state[KEY].state_batches == [B(0, 1, ACKNOWLEDGED, 1), B(2, 9, AVAILABLE, 1)]
    replay(state, *update_record(KEY, 0, 4, 2, 2, [B(2, 2, ARCHIVED, 1)]))
    assert state[KEY].state_batches == [B(2, 2, ARCHIVED, 1), B(3, 9, AVAILABLE, 1)]
    assert (state[KEY].start_offset, state[KEY].leader_epoch) == (2, 4)
    replay(state, *snapshot_record(KEY, ShareGroupOffset(1, 1, 4, 10, 0, 6, 6, [])))
    assert state[KEY].state_batches == [] and state[KEY].snapshot_epoch == 1
    replay(state, snapshot_record(KEY, first)[0], None)
    assert state == {}


@pytest.mark.kafka
@pytest.mark.slow
def test_the_state_kafkas_share_consumer_left_replays_to_all_settled(
    written: BrokerWritten,
) -> None:
    """Kafka 4.3.1's KafkaShareConsumer settled all twelve records of "shared" (kafka_scenarios:
    offsets 3, 7 and 11 released once and accepted on their second delivery, 4 and 9
    rejected, the rest accepted): replayed, every offset from the share-partition's start
    offset on has exactly that delivery state and count (Kafka moves the persisted start
    offset lazily: what is below it is settled)."""
    if written.version.startswith("3."):
        pytest.skip("Kafka 3.9 has no share groups")
    metadata = read_partition_metadata(written.data_dir / "shared-0")
    assert metadata is not None
    with LogManager([written.data_dir]) as manager:
        logs = [lg for tp, lg in manager.logs().items() if tp.topic == "__share_group_state"]
        state = load_share_state(logs)
    partition = state[("oracle-share", metadata.topic_id, 0)]
    held = {o: (b.delivery_state, b.delivery_count) for b in partition.state_batches
            for o in range(b.first_offset, b.last_offset + 1)}  # fmt: skip
    expected = {
        o: (ACKNOWLEDGED, 2) if o % 4 == 3 else (ARCHIVED, 1) if o % 5 == 4 else (ACKNOWLEDGED, 1)
        for o in range(partition.start_offset, 12)
    }
    assert 0 <= partition.start_offset <= 12 and held == expected
    # and a share-partition taking this state over starts past the twelve settled records
    taken = SharePartition(partition.start_offset, partition.state_batches,
                           lock_duration_ms=30_000, delivery_count_limit=5,
                           max_in_flight=2000)  # fmt: skip
    assert (taken.start_offset, taken.next_fetch_offset()) == (12, 12)


def test_the_module_refuses_nothing_it_should_read(tmp_path: Path) -> None:
    """A directory without the topic has no state; a record of an unknown type is skipped."""
    with LogManager([tmp_path]) as manager:
        assert load_share_state([]) == {}
        assert manager.topics() == {}
    state: dict[tuple[str, str, int], ShareGroupOffset] = {}
    replay(state, b"\x00\x07whatever", b"\x00\x00")
    assert state == {}
