"""__consumer_offsets and __transaction_state records, decoded as Kafka's dump tool prints them.

The vectors are the first record of each internal topic as Kafka 4.3.1 and 3.9.2 brokers wrote
them in the oracle run (tests/kafka_scenarios.py); test_kafka_oracle_dump.py checks whole files
against DumpLogSegments itself.
"""

from __future__ import annotations

import pytest

from kafkalog.records import coordinator

OFFSET_KEY = "0001000c6f7261636c652d67726f7570000a636f6465632d6e6f6e6500000000"
OFFSET_VALUE_V4 = (
    "0004000000000000000affffffff01000001a208d359aa0100109135e87323b14c53833bcb6d16090bb8"
)
OFFSET_VALUE_V3 = "0003000000000000000affffffff0000000001a208d357a5"
TXN_KEY = "0000000a6f7261636c652d74786e"
TXN_VALUE_V1 = (
    "0001000000000000000000000000ea600000000001a208d2db65ffffffffffffffff0100080000000000000000"
)
TXN_VALUE_V0 = "0000000000000000000100000000ea6000ffffffff000001a208d2d9a2ffffffffffffffff"


def test_offset_commit_v4_with_its_tagged_topic_id() -> None:
    rec = coordinator.decode("offsets", bytes.fromhex(OFFSET_KEY), bytes.fromhex(OFFSET_VALUE_V4))
    key, payload = coordinator.format_json(rec, 0, 1)
    assert key == (
        '{"type":"1","data":{"group":"oracle-group","topic":"codec-none","partition":0}}'
    )
    assert payload == (
        '{"version":"4","data":{"offset":10,"leaderEpoch":-1,"metadata":"","commitTimestamp":'
        '1795444398506,"topicId":"kTXocyOxTFODO8ttFgkLuA"}}'
    )


def test_offset_commit_v3() -> None:
    rec = coordinator.decode("offsets", bytes.fromhex(OFFSET_KEY), bytes.fromhex(OFFSET_VALUE_V3))
    assert rec.value == {"offset": 10, "leaderEpoch": -1, "metadata": "",
                         "commitTimestamp": 1795444397989}  # fmt: skip


def test_transaction_log_v1_leaves_out_tagged_fields_at_their_default() -> None:
    rec = coordinator.decode("transactions", bytes.fromhex(TXN_KEY), bytes.fromhex(TXN_VALUE_V1))
    _, payload = coordinator.format_json(rec, 0, 0)
    assert payload == (
        '{"version":"1","data":{"producerId":0,"previousProducerId":0,"producerEpoch":0,'
        '"transactionTimeoutMs":60000,"transactionStatus":0,"transactionPartitions":null,'
        '"transactionLastUpdateTimestampMs":1795444366181,"transactionStartTimestampMs":-1}}'
    )


def test_transaction_log_v0_in_kafka_3_9_text() -> None:
    rec = coordinator.decode("transactions", bytes.fromhex(TXN_KEY), bytes.fromhex(TXN_VALUE_V0))
    assert coordinator.format_transaction_text(rec) == (
        "transaction_metadata::transactionalId=oracle-txn",
        "producerId:1,producerEpoch:0,state=Empty,partitions=[],"
        "txnLastUpdateTimestamp=1795444365730,txnTimeoutMs=60000",
    )


def test_tombstones_and_unknown_types() -> None:
    rec = coordinator.decode("transactions", bytes.fromhex(TXN_KEY), None)
    assert coordinator.format_json(rec, 5, 0)[1] == "<DELETE>"
    assert coordinator.format_transaction_text(rec)[1] == "<DELETE>"
    unknown = coordinator.decode("offsets", bytes.fromhex("0009"), b"")
    assert coordinator.format_json(unknown, 7, 9) == (
        "Unknown record type 9 at offset 7, skipping.",
        None,
    )


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_records_are_corrupt_record_errors(cut: int) -> None:
    from kafkalog import CorruptRecordError

    with pytest.raises(CorruptRecordError):
        coordinator.decode(
            "transactions", bytes.fromhex(TXN_KEY), bytes.fromhex(TXN_VALUE_V1)[:cut]
        )


def _s(text: str | None) -> bytes:
    return b"\xff\xff" if text is None else len(text).to_bytes(2, "big") + text.encode()


def _b(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def test_group_metadata_v3_decodes_a_consumer_members_subscription_keeps_unparsable_bytes() -> None:
    """Kafka's OffsetsMessageParser replaces a "consumer" member's subscription and assignment
    by their decoded form, and keeps the base64 bytes when they do not parse."""
    subscription = (
        (1).to_bytes(2, "big")  # ConsumerProtocolSubscription v1
        + (1).to_bytes(4, "big")
        + _s("t")  # topics
        + (-1).to_bytes(4, "big", signed=True)  # userData: null
        + (0).to_bytes(4, "big")  # ownedPartitions: none
    )
    member = (
        _s("m1") + _s(None) + _s("c") + _s("/h") + (300000).to_bytes(4, "big")
        + (45000).to_bytes(4, "big") + _b(subscription) + _b(b"\x00")
    )  # fmt: skip
    value = _group_value(member)
    key = (2).to_bytes(2, "big") + _s("g")
    rec = coordinator.decode("offsets", key, value)
    assert coordinator.format_json(rec, 0, 2) == (
        '{"type":"2","data":{"group":"g"}}',
        '{"version":"3","data":{"protocolType":"consumer","generation":1,"protocol":"range",'
        '"leader":"m1","currentStateTimestamp":5,"members":[{"memberId":"m1",'
        '"groupInstanceId":null,"clientId":"c","clientHost":"/h","rebalanceTimeout":300000,'
        '"sessionTimeout":45000,"subscription":{"topics":["t"],"userData":null,'
        '"ownedPartitions":[]},"assignment":"AA=="}]}}',
    )
    # a damaged value is a CorruptRecordError wherever it is cut, never a wrong line
    from kafkalog import CorruptRecordError

    for cut in range(2, len(value)):
        with pytest.raises(CorruptRecordError):
            coordinator.decode("offsets", key, value[:cut])


def _group_value(member: bytes) -> bytes:
    return (
        (3).to_bytes(2, "big") + _s("consumer") + (1).to_bytes(4, "big") + _s("range")
        + _s("m1") + (5).to_bytes(8, "big") + (1).to_bytes(4, "big") + member
    )  # fmt: skip
