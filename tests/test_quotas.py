"""Client quotas as Kafka's ClientQuotaManager keeps them: the throttle time of its formula
(QuotaUtils.throttleTime over Rate.windowSize), DefaultQuotaCallback's order of entities,
ClientQuotaControlManager's refusals, and the durable file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog.errors import CorruptCheckpointError
from kafkalog.server.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    FILE_NAME,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaManager,
    entity_of,
    invalid_entity,
    invalid_value,
    load_quotas,
    save_quotas,
)

ALICE = "User:alice"


def test_the_throttle_is_kafkas_formula_over_its_window() -> None:
    """11,000 bytes at once against 1,000 B/s over 11 one-second samples: the rate counts at
    least 10 whole windows, so 1,100 B/s, and the wait is (1100 - 1000) / 1000 * 10 s."""
    quotas = QuotaManager({entity_of([(USER, "alice")]): {PRODUCER_BYTE_RATE: 1000.0}})
    assert quotas.record(PRODUCER_BYTE_RATE, ALICE, "c", 10_000, 0) == 0  # 1,000 B/s: at quota
    assert quotas.record(PRODUCER_BYTE_RATE, ALICE, "c", 1_000, 0) == 1000
    # 20 s later every sample has expired: the slate is clean
    assert quotas.record(PRODUCER_BYTE_RATE, ALICE, "c", 5_000, 20_000) == 0


def test_a_client_kept_to_its_throttle_stays_within_its_quota() -> None:
    """A client that waits out each throttle before its next request, as a muted connection
    must, is held to the quota over a long run."""
    quotas = QuotaManager({entity_of([(CLIENT_ID, "c")]): {PRODUCER_BYTE_RATE: 50_000.0}},
                          samples=2)  # fmt: skip
    now = sent = 0
    while now < 60_000:
        sent += 16_384
        now += 5 + quotas.record(PRODUCER_BYTE_RATE, ALICE, "c", 16_384, now)
    assert sent / (now / 1000) == pytest.approx(50_000, rel=0.05)


def test_the_first_configured_entity_in_kafkas_order_decides_and_shares_its_rate() -> None:
    u, c = (USER, "alice"), (CLIENT_ID, "app")
    levels = [
        entity_of([u, c]), entity_of([u, (CLIENT_ID, None)]), entity_of([u]),
        entity_of([(USER, None), c]), entity_of([(USER, None), (CLIENT_ID, None)]),
        entity_of([(USER, None)]), entity_of([c]), entity_of([(CLIENT_ID, None)]),
    ]  # fmt: skip
    for i, winner in enumerate(levels):
        quotas = QuotaManager({e: {PRODUCER_BYTE_RATE: float(100 + j)} for j, e in
                               enumerate(levels[i:], start=i)})  # fmt: skip
        found = quotas.limit(PRODUCER_BYTE_RATE, "alice", "app")
        assert found is not None and found[0] == 100 + i, winner
    # user=alice: all her clients share one rate; client default: each client its own
    shared = QuotaManager({entity_of([u]): {PRODUCER_BYTE_RATE: 1000.0}})
    assert shared.record(PRODUCER_BYTE_RATE, ALICE, "one", 11_000, 0) > 0
    assert shared.record(PRODUCER_BYTE_RATE, ALICE, "two", 1, 0) > 0
    apart = QuotaManager({entity_of([(CLIENT_ID, None)]): {PRODUCER_BYTE_RATE: 1000.0}})
    assert apart.record(PRODUCER_BYTE_RATE, ALICE, "one", 11_000, 0) > 0
    assert apart.record(PRODUCER_BYTE_RATE, ALICE, "two", 1, 0) == 0
    # a quota of another kind does not apply
    assert shared.record(CONSUMER_BYTE_RATE, ALICE, "one", 10**9, 0) == 0


def test_unrecord_takes_a_throttled_fetch_back() -> None:
    quotas = QuotaManager({entity_of([(CLIENT_ID, "c")]): {CONSUMER_BYTE_RATE: 1000.0}})
    assert quotas.record(CONSUMER_BYTE_RATE, ALICE, "c", 20_000, 0) > 0
    quotas.unrecord(CONSUMER_BYTE_RATE, ALICE, "c", 20_000, 0)
    assert quotas.record(CONSUMER_BYTE_RATE, ALICE, "c", 5_000, 0) == 0


def test_entities_and_values_kafka_refuses() -> None:
    assert invalid_entity(()) == "Invalid empty client quota entity"
    assert "duplicate" in str(invalid_entity(((USER, "a"), (USER, "b"))))
    assert invalid_entity(((USER, ""),)) == "Empty user not supported"
    assert "Unhandled" in str(invalid_entity((("group", "g"),)))
    assert "IP quotas" in str(invalid_entity((("ip", "10.0.0.1"),)))
    assert (
        invalid_value("producer_byte_rate", 0) == "Quota producer_byte_rate must be greater than 0"
    )
    assert (
        invalid_value("producer_byte_rate", 1.5)
        == "producer_byte_rate cannot be a fractional value."
    )
    assert invalid_value(REQUEST_PERCENTAGE, 12.5) is None
    assert invalid_value("bogus", 1) == "Invalid configuration key bogus"


@given(st.dictionaries(st.sampled_from(["alice", "bob", None]),
                       st.integers(1, 10**9).map(float), max_size=3))  # fmt: skip
def test_the_quota_file_round_trips(tmp_path_factory: pytest.TempPathFactory, users: dict) -> None:
    quotas = {entity_of([(USER, u)]): {PRODUCER_BYTE_RATE: v} for u, v in users.items()}
    d = tmp_path_factory.mktemp("quotas")
    save_quotas(d, quotas)
    assert load_quotas(d) == quotas


def test_a_damaged_quota_file_stops_the_start_and_kraft_quotas_seed_a_new_one(
    tmp_path: Path,
) -> None:
    kraft = {entity_of([(USER, "alice")]): {PRODUCER_BYTE_RATE: 1024.0, "bogus": 1.0}}
    assert load_quotas(tmp_path, kraft) == {
        entity_of([(USER, "alice")]): {PRODUCER_BYTE_RATE: 1024.0}
    }
    save_quotas(tmp_path, {})
    assert load_quotas(tmp_path, kraft) == {}  # the file, once written, is the truth
    raw = {"quotas": [{"entity": [["user", "a"]], "values": {"producer_byte_rate": -1}}]}
    (tmp_path / FILE_NAME).write_text(json.dumps(raw))
    with pytest.raises(CorruptCheckpointError):
        load_quotas(tmp_path)


def test_a_client_inventing_client_ids_cannot_grow_the_rates_without_bound() -> None:
    quotas = QuotaManager({entity_of([(CLIENT_ID, None)]): {PRODUCER_BYTE_RATE: 1000.0}})
    for i in range(30_000):  # each id its own rate; each second's ids idle the next
        quotas.record(PRODUCER_BYTE_RATE, ALICE, f"id-{i}", 1, now_ms=i * 2)
    assert quotas.tracked <= 20_000
    # a live client keeps its rate through a sweep
    quotas.record(PRODUCER_BYTE_RATE, ALICE, "live", 11_000, 60_000)
    for i in range(30_000):
        quotas.record(PRODUCER_BYTE_RATE, ALICE, f"late-{i}", 1, now_ms=60_000)
    assert quotas.record(PRODUCER_BYTE_RATE, ALICE, "live", 1, 60_000) > 0
