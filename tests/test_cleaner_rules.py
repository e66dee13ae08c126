"""The cleaner's per-record rules, enumerated case by case, in Python and in C.

Each rule exists twice: the reference (``kafkalog.cleaner.policy.map_record`` and
``retain_record``) and its compiled twin (``map_parsed``, ``decide`` and ``decide_logged`` in
``_keymap.c`` / ``_keymap_runs.c``). The tables below are the rules in words; every case of
every input (key, offset against the map, value, delete horizon, map room) runs through every
implementation, and each must give the table's verdict. Changing one implementation without the
other, or either without the table, fails here. The property tests in test_fastcompact.py then
cover whole logs; this file covers every branch of each rule on purpose, not by chance.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from kafkalog.cleaner._keymap import KeyOffsetMap
from kafkalog.cleaner.keymap import filter_records, filter_region, map_batch, map_region
from kafkalog.cleaner.offset_map import DigestOffsetMap
from kafkalog.cleaner.policy import CleanerCounters, map_record, retain_record
from kafkalog.records.batch import RecordBatch
from kafkalog.records.builder import RecordBatchBuilder
from kafkalog.records.memory_records import MemoryRecords

pytestmark = pytest.mark.one_codec  # compares the two implementations itself

NOW = 1_700_000_000_000
OFFSET = 10  # the record under test; the map's state is set around it
KEY = b"k"
KEEP, DROP, DROP_INVALID = "keep", "drop", "drop, counted invalid"


# --- the retain rule (Kafka's Cleaner.shouldRetainRecord) ------------------------------------


@dataclass(frozen=True)
class RetainCase:
    beyond_map: bool  # the record's offset is above the map's latest offset
    key: str  # "none" (keyless), "absent" (not in the map), "older" (a later offset), "latest"
    tombstone: bool
    horizon: str  # the batch's delete horizon: "none", "ahead" (not reached), "passed"

    def __str__(self) -> str:
        where = "beyond" if self.beyond_map else "in-map"
        value = "tombstone" if self.tombstone else "value"
        return f"{where}-{self.key}-{value}-horizon-{self.horizon}"


RETAIN_RULES: list[tuple[str, Callable[[RetainCase], bool], str]] = [
    ("beyond the map: not cleaned this round", lambda c: c.beyond_map, KEEP),
    ("keyless in a compacted topic", lambda c: c.key == "none", DROP_INVALID),
    ("a later record of its key exists", lambda c: c.key == "older", DROP),
    ("the latest record of its key, with a value", lambda c: not c.tombstone, KEEP),
    ("a latest tombstone, horizon not passed", lambda c: c.horizon != "passed", KEEP),
    ("a latest tombstone past its delete horizon", lambda c: True, DROP),
]

RETAIN_CASES = [
    RetainCase(*values)
    for values in itertools.product(
        (False, True),
        ("none", "absent", "older", "latest"),
        (False, True),
        ("none", "ahead", "passed"),
    )
]


def expected_retain(case: RetainCase) -> tuple[str, str]:
    """(rule, verdict): the first rule of the table that applies."""
    return next((name, verdict) for name, applies, verdict in RETAIN_RULES if applies(case))


def retain_batch(case: RetainCase) -> RecordBatch:
    horizon = {"none": None, "ahead": NOW + 1, "passed": NOW - 1}[case.horizon]
    builder = RecordBatchBuilder(base_offset=OFFSET, delete_horizon_ms=horizon)
    builder.append(
        None if case.tombstone else b"value",
        key=None if case.key == "none" else KEY,
        timestamp=NOW - 5,
    )
    batch = next(MemoryRecords(builder.build()).batches())
    assert isinstance(batch, RecordBatch)
    return batch


def key_latest(case: RetainCase) -> int | None:
    """The offset the map holds for the record's key, None if it holds none."""
    return {"older": OFFSET + 5, "latest": OFFSET}.get(case.key)


def map_latest_offset(case: RetainCase) -> int:
    return OFFSET - 1 if case.beyond_map else OFFSET + 20


def verdict(kept: bool, invalid: int) -> str:
    assert invalid in (0, 1) and not (kept and invalid)
    return KEEP if kept else (DROP_INVALID if invalid else DROP)


def reference_offset_map() -> DigestOffsetMap:
    """The Python map, whichever codec the session runs."""
    return DigestOffsetMap(1 << 16)


def reference_retain(case: RetainCase) -> str:
    offset_map = reference_offset_map()
    latest = key_latest(case)
    if latest is not None:
        offset_map.put(KEY, latest)
    offset_map.update_latest_offset(map_latest_offset(case))
    batch = retain_batch(case)
    counters = CleanerCounters()
    kept = retain_record(
        offset_map, batch, next(iter(batch)), retain_legacy_deletes=False,
        current_time=NOW, counters=counters,
    )  # fmt: skip
    return verdict(kept, counters.invalid_messages)


def compiled_map(case: RetainCase) -> KeyOffsetMap:
    compiled = KeyOffsetMap(1 << 10, 1 << 16)
    latest = key_latest(case)
    if latest is not None:
        compiled.put(KEY, latest)
    compiled.latest_offset = map_latest_offset(case)
    return compiled


def compiled_retain_batch(case: RetainCase) -> str:
    """``decide``, through the per-batch call (the policy passes the horizon rule in)."""
    batch = retain_batch(case)
    horizon = batch.delete_horizon_ms
    retained = filter_records(
        compiled_map(case), batch, keep_tombstones=horizon is None or horizon > NOW,
        new_horizon=NOW + 1000,
    )  # fmt: skip
    return verdict(retained.kept == 1, retained.invalid)


def region_verdict(compiled: KeyOffsetMap, data: bytes, case: RetainCase) -> str:
    walked = filter_region(
        compiled, memoryview(data), 0, 0, len(data), max_batch_size=1 << 20,
        upper_bound_offset=OFFSET + 100, last_producer_ids=set(), current_time=NOW,
        new_horizon=NOW + 1000,
    )  # fmt: skip
    assert walked.position == len(data) and walked.read == 1
    if walked.kept:  # kept whole, or rebuilt: only a kept tombstone needing a horizon
        ((_, _, _, _, rebuilt),) = walked.batches
        assert rebuilt == (case.tombstone and case.horizon == "none")
    return verdict(walked.kept == 1, walked.invalid)


def compiled_retain_region(case: RetainCase) -> str:
    """``decide`` inside the run walk, which applies the horizon rule itself."""
    data = bytes(retain_batch(case).buffer)
    return region_verdict(compiled_map(case), data, case)


def compiled_retain_logged(case: RetainCase) -> str | None:
    """``decide_logged``: the run walk deciding from the key scan's notes. The scan notes only
    batches whose keyed records it mapped, so "absent" has no notes to decide from."""
    if case.key == "absent":
        return None
    data = bytes(retain_batch(case).buffer)
    compiled = KeyOffsetMap(1 << 10, 1 << 16)
    map_region(compiled, memoryview(data), 0, 0, len(data), start=0, max_batch_size=1 << 20)
    assert compiled.log_size > 0, "the key scan took no notes"
    if case.key == "older":
        compiled.put(KEY, OFFSET + 5)  # same key id: the notes stay valid
    compiled.latest_offset = map_latest_offset(case)
    return region_verdict(compiled, data, case)


@pytest.mark.parametrize("case", RETAIN_CASES, ids=str)
def test_every_retain_case_gets_the_tables_verdict_everywhere(case: RetainCase) -> None:
    rule, want = expected_retain(case)
    got = {
        "retain_record (Python)": reference_retain(case),
        "decide (C, per batch)": compiled_retain_batch(case),
        "decide (C, run walk)": compiled_retain_region(case),
    }
    logged = compiled_retain_logged(case)
    if logged is not None:
        got["decide_logged (C, from notes)"] = logged
    assert got == dict.fromkeys(got, want), f"rule {rule!r}"


def test_every_retain_rule_is_reached() -> None:
    reached = {expected_retain(case)[0] for case in RETAIN_CASES}
    assert reached == {name for name, _, _ in RETAIN_RULES}


# --- the key scan (Kafka's Cleaner.buildOffsetMapForSegment) ---------------------------------


@dataclass(frozen=True)
class MapCase:
    keyless: bool
    below_start: bool
    map_room: str  # "room", "full-new-key", "full-same-key"

    def __str__(self) -> str:
        key = "keyless" if self.keyless else "keyed"
        where = "below-start" if self.below_start else "from-start"
        return f"{key}-{where}-{self.map_room}"


MAP_RULES: list[tuple[str, Callable[[MapCase], bool], str]] = [
    ("keyless: nothing to map", lambda c: c.keyless, "pass over"),
    ("below the start of the dirty section", lambda c: c.below_start, "pass over"),
    ("the map is full, even for a key it holds", lambda c: c.map_room != "room", "stop"),
    ("a keyed record from the start", lambda c: True, "put"),
]

MAP_CASES = [
    MapCase(*values)
    for values in itertools.product(
        (False, True), (False, True), ("room", "full-new-key", "full-same-key")
    )
]
CAPACITY = 2


def expected_map(case: MapCase) -> tuple[str, str]:
    return next((name, verdict) for name, applies, verdict in MAP_RULES if applies(case))


def map_batch_of(case: MapCase) -> RecordBatch:
    builder = RecordBatchBuilder(base_offset=OFFSET)
    builder.append(b"value", key=None if case.keyless else KEY, timestamp=NOW)
    batch = next(MemoryRecords(builder.build()).batches())
    assert isinstance(batch, RecordBatch)
    return batch


def preloaded_keys(case: MapCase) -> list[bytes]:
    return {"room": [b"other"], "full-new-key": [b"a", b"b"], "full-same-key": [KEY, b"b"]}[
        case.map_room
    ]


def start_of(case: MapCase) -> int:
    return OFFSET + 1 if case.below_start else OFFSET


def map_outcome(full: bool, latest: int) -> str:
    if full:
        return "stop"
    return "put" if latest == OFFSET else "pass over"


def reference_map(case: MapCase) -> str:
    offset_map = reference_offset_map()
    for key in preloaded_keys(case):
        offset_map.put(key, 0)
    record = next(iter(map_batch_of(case)))
    room = map_record(
        offset_map, record.key, record.offset, start=start_of(case), capacity=CAPACITY
    )
    return map_outcome(not room, offset_map.get(KEY))


def compiled_preloaded(case: MapCase) -> KeyOffsetMap:
    compiled = KeyOffsetMap(CAPACITY, 1 << 16)
    for key in preloaded_keys(case):
        compiled.put(key, 0)
    return compiled


def compiled_map_batch(case: MapCase) -> str:
    compiled = compiled_preloaded(case)
    _, full = map_batch(compiled, map_batch_of(case), start_of(case))
    return map_outcome(full, compiled.get(KEY))


def compiled_map_region(case: MapCase) -> str:
    compiled = compiled_preloaded(case)
    data = bytes(map_batch_of(case).buffer)
    walked = map_region(
        compiled, memoryview(data), 0, 0, len(data), start=start_of(case),
        max_batch_size=1 << 20,
    )  # fmt: skip
    return map_outcome(walked.full, compiled.get(KEY))


@pytest.mark.parametrize("case", MAP_CASES, ids=str)
def test_every_key_scan_case_gets_the_tables_verdict_everywhere(case: MapCase) -> None:
    rule, want = expected_map(case)
    got = {
        "map_record (Python)": reference_map(case),
        "map_parsed (C, per batch)": compiled_map_batch(case),
        "map_parsed (C, run walk)": compiled_map_region(case),
    }
    assert got == dict.fromkeys(got, want), f"rule {rule!r}"


def test_every_key_scan_rule_is_reached() -> None:
    reached = {expected_map(case)[0] for case in MAP_CASES}
    assert reached == {name for name, _, _ in MAP_RULES}
