"""Every API ``kafkalog serve`` answers, asked by a principal no ACL allows anything and by a
super user: the first gets Kafka's authorization error for the resource the request names and
changes nothing (no byte written in any log directory, no group joined, no offset committed,
no ACL added), the second gets no authorization error at all. The same requests go to Apache
Kafka with ``StandardAuthorizer``, and for the APIs both serve the refused principal's codes
must be Kafka's.

The requests are "one of everything" (test_server_every_api): every name in them is ``t`` (the
topic, the group, the transactional id), at the highest version served, over a SASL/PLAIN
connection (a connection per API: some refusals close it, as Kafka's do); Fetch and
OffsetForLeaderEpoch as a consumer sends them."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog import LogManager, Record
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import _entity, is_flexible, make
from kafkalog.server import serve
from kafkalog.server.apis import SUPPORTED_VERSIONS
from server_helpers import decode_response, frame, read_frame, request_module
from test_server_every_api import ORDER, one_of_everything

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(600)]

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-pw" user_bob="bob-pw";')  # fmt: skip
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
AUTHORIZATION_CODES = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}

# What a principal no ACL allows anything gets for each API's one-of-everything request, by
# the rule of KafkaApis / AclApis / ControllerApis (None: the API authorizes nothing, or only
# filters what it lists, and there is nothing to list).
K = ApiKey
DENIED: dict[int, int | None] = {
    K.PRODUCE: TOPIC_DENIED,  # transactional id "t", but its batch is not transactional
    K.FETCH: TOPIC_DENIED,
    K.LIST_OFFSETS: TOPIC_DENIED,
    K.METADATA: TOPIC_DENIED,
    K.API_VERSIONS: None,
    K.CREATE_TOPICS: TOPIC_DENIED,
    K.CREATE_PARTITIONS: TOPIC_DENIED,
    K.DELETE_TOPICS: TOPIC_DENIED,
    K.DELETE_RECORDS: TOPIC_DENIED,
    K.OFFSET_FOR_LEADER_EPOCH: TOPIC_DENIED,
    K.DESCRIBE_LOG_DIRS: CLUSTER_DENIED,
    K.DESCRIBE_CLUSTER: None,
    K.DESCRIBE_CONFIGS: TOPIC_DENIED,
    K.ALTER_CONFIGS: TOPIC_DENIED,
    K.INCREMENTAL_ALTER_CONFIGS: TOPIC_DENIED,
    K.DESCRIBE_PRODUCERS: TOPIC_DENIED,
    K.WRITE_TXN_MARKERS: CLUSTER_DENIED,
    K.DESCRIBE_USER_SCRAM_CREDENTIALS: CLUSTER_DENIED,
    K.ALTER_USER_SCRAM_CREDENTIALS: CLUSTER_DENIED,
    K.DESCRIBE_ACLS: CLUSTER_DENIED,
    K.CREATE_ACLS: CLUSTER_DENIED,
    K.DELETE_ACLS: CLUSTER_DENIED,
    K.DESCRIBE_CLIENT_QUOTAS: CLUSTER_DENIED,
    K.ALTER_CLIENT_QUOTAS: CLUSTER_DENIED,
    K.INIT_PRODUCER_ID: TXN_DENIED,
    K.FIND_COORDINATOR: GROUP_DENIED,
    K.JOIN_GROUP: GROUP_DENIED,
    K.SYNC_GROUP: GROUP_DENIED,
    K.HEARTBEAT: GROUP_DENIED,
    K.LEAVE_GROUP: GROUP_DENIED,
    K.CONSUMER_GROUP_HEARTBEAT: GROUP_DENIED,
    K.CONSUMER_GROUP_DESCRIBE: GROUP_DENIED,
    K.SHARE_GROUP_HEARTBEAT: GROUP_DENIED,
    K.SHARE_GROUP_DESCRIBE: GROUP_DENIED,
    K.SHARE_FETCH: GROUP_DENIED,
    K.SHARE_ACKNOWLEDGE: GROUP_DENIED,
    K.DESCRIBE_SHARE_GROUP_OFFSETS: GROUP_DENIED,
    K.ALTER_SHARE_GROUP_OFFSETS: GROUP_DENIED,
    K.DELETE_SHARE_GROUP_OFFSETS: GROUP_DENIED,
    K.OFFSET_COMMIT: GROUP_DENIED,
    K.OFFSET_FETCH: GROUP_DENIED,
    K.DESCRIBE_GROUPS: GROUP_DENIED,
    K.LIST_GROUPS: None,  # lists only the groups the principal may describe
    K.DELETE_GROUPS: GROUP_DENIED,
    K.OFFSET_DELETE: GROUP_DENIED,
    K.ADD_PARTITIONS_TO_TXN: TXN_DENIED,
    K.ADD_OFFSETS_TO_TXN: TXN_DENIED,
    K.END_TXN: TXN_DENIED,
    K.TXN_OFFSET_COMMIT: TXN_DENIED,
    K.LIST_TRANSACTIONS: None,  # lists only the transactional ids it may describe
    K.DESCRIBE_TRANSACTIONS: TXN_DENIED,
}
# authentication itself: the login of every connection below
AUTHENTICATION = {K.SASL_HANDSHAKE, K.SASL_AUTHENTICATE}


def test_the_matrix_names_every_api_the_door_serves() -> None:
    assert set(DENIED) | AUTHENTICATION == set(SUPPORTED_VERSIONS)


def _login(sock: socket.socket, user: str, password: str) -> None:
    hs, au = request_module(17, 1), request_module(36, 2)
    token = f"\0{user}\0{password}".encode()
    sock.sendall(
        frame(17, 1, make(hs, "SaslHandshakeRequest", mechanism="PLAIN"), 2)
        + frame(36, 2, make(au, "SaslAuthenticateRequest", auth_bytes=token), 3)
    )
    read_frame(sock)
    answer = decode_response(36, 2, read_frame(sock), header_v1=True)
    assert answer.error_code == 0, answer


def _codes(value: Any) -> set[int]:
    """Every ``*error_code`` in a response, at any depth."""
    found: set[int] = set()
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name.endswith("error_code") and isinstance(item, int):
                found.add(int(item))
            else:
                found |= _codes(item)
    elif isinstance(value, tuple):
        for item in value:
            found |= _codes(item)
    return found


def matrix(
    port: int, user: str, password: str, keys: list[int], versions: dict[int, int]
) -> dict[int, set[int] | None]:
    """Each API's error codes for ``user`` (None: the connection closed without an answer)."""
    out: dict[int, set[int] | None] = {}
    for key in keys:
        version = versions[key]
        body = _as_a_client_sends_it(key, one_of_everything(_entity(key, version, False)))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            _login(sock, user, password)
            sock.sendall(frame(key, version, body, 7))
            data = read_frame(sock)
        if not data:
            out[key] = None
            continue
        flexible = key != ApiKey.API_VERSIONS and is_flexible(key, version)
        try:
            out[key] = _codes(decode_response(key, version, data, header_v1=flexible))
        except Exception as err:  # kio refuses the -1 ms start time Kafka's clients read
            assert key == ApiKey.DESCRIBE_TRANSACTIONS and "negative timestamp" in str(err)
            # size, correlation id, tags, throttle, one-state array: the state's error code
            out[key] = {int.from_bytes(data[14:16], "big")}
    return out


def _as_a_client_sends_it(key: int, body: Any) -> Any:
    """Fetch and OffsetForLeaderEpoch as a consumer's (a follower's needs CLUSTER_ACTION),
    Fetch without a session (Kafka answers an unknown session before anything else), and the
    config APIs for topic ``t`` (Kafka checks no ACL for an unknown resource type)."""
    if hasattr(body, "replica_id"):
        body = dataclasses.replace(body, replica_id=-1)
    if key == ApiKey.FETCH:
        body = dataclasses.replace(body, session_id=0, session_epoch=-1)
    if key in (ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        topic = dataclasses.replace(body.resources[0], resource_type=2)
        body = dataclasses.replace(body, resources=(topic,))
    return body


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def _overrides(listener: str = "SASL_PLAINTEXT://127.0.0.1:0") -> dict[str, str]:
    return {
        "listeners": listener,
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)[0].append([Record(b"x")])
    with serve(tmp_path, overrides=_overrides()) as server:
        yield server, tmp_path


def _port(server: Any) -> int:
    return int(server.bootstrap_servers.rsplit(":", 1)[1])


def test_a_principal_without_acls_gets_kafkas_error_and_changes_nothing(
    secured: tuple[Any, Path],
) -> None:
    server, data = secured
    before = _files(data)
    highest = {key: high for key, (_, high) in SUPPORTED_VERSIONS.items()}
    got = matrix(_port(server), "bob", "bob-pw", [k for k in ORDER if k in DENIED], highest)
    wrong = {}
    for key, expected in DENIED.items():
        codes = got[key]
        refused = None if codes is None else codes & AUTHORIZATION_CODES
        if refused != (set() if expected is None else {expected}):
            wrong[ApiKey(key).name] = (codes, expected)
    assert not wrong, wrong
    assert _files(data) == before  # not a byte written: no topic, offset, group or ACL
    assert server.manager.topics() == {"t": 1}
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-pw"})  # fmt: skip
    assert admin.list_consumer_groups().result(15).valid == []  # no group joined


def test_a_super_user_is_refused_nothing(secured: tuple[Any, Path]) -> None:
    server, _ = secured
    highest = {key: high for key, (_, high) in SUPPORTED_VERSIONS.items()}
    got = matrix(_port(server), "admin", "admin-pw", [k for k in ORDER if k in DENIED], highest)
    refused = {
        ApiKey(key).name: codes
        for key, codes in got.items()
        if codes is None or codes & AUTHORIZATION_CODES
    }
    assert not refused, refused


def test_broker_and_group_configs_need_the_clusters_and_the_groups_acl(
    secured: tuple[Any, Path],
) -> None:
    """Altering a broker's configs needs ALTER_CONFIGS on the cluster, a group's on the group:
    without them, Kafka's error and no file written; a super user alters both."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    server, data = secured

    def alter(user: str, kind: ResourceType, name: str, key: str, value: str) -> str:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers,
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": user, "sasl.password": f"{user}-pw"})  # fmt: skip
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(kind, name, incremental_configs=[entry])
        (future,) = admin.incremental_alter_configs([resource]).values()
        try:
            future.result(15)
        except Exception as err:
            return str(err.args[0].name())
        return "OK"

    before = _files(data)
    broker = (ResourceType.BROKER, "1", "log.retention.ms", "60000")
    group = (ResourceType.GROUP, "g", "consumer.session.timeout.ms", "50000")
    assert alter("bob", *broker) == "CLUSTER_AUTHORIZATION_FAILED"
    assert alter("bob", *group) == "GROUP_AUTHORIZATION_FAILED"
    assert _files(data) == before
    assert (alter("admin", *broker), alter("admin", *group)) == ("OK", "OK")
    assert server.manager.broker_configs("1") == {"log.retention.ms": "60000"}
    assert server.manager.group_configs("g") == {"consumer.session.timeout.ms": "50000"}


@pytest.mark.kafka
@pytest.mark.slow
def test_kafka_with_standard_authorizer_refuses_the_same_way(tmp_path: Path) -> None:
    """The oracle: Apache Kafka with StandardAuthorizer, a SASL_PLAINTEXT listener for the
    clients and its own PLAINTEXT one between broker and controller (whose anonymous principal
    is a super user), asked the same requests by the same principal."""
    from kafka_oracle import KAFKA_VERSIONS, KafkaBroker

    broker = KafkaBroker(KAFKA_VERSIONS[-1], tmp_path / "broker")
    client_port = int(broker.add_sasl_listener(_overrides()).rsplit(":", 1)[1])
    highest = {key: high for key, (_, high) in SUPPORTED_VERSIONS.items()}
    with broker:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 1)])["t"].result(30)
        got = matrix(client_port, "bob", "bob-pw", [k for k in ORDER if k in DENIED], highest)
    theirs = {
        ApiKey(key).name: None if codes is None else codes & AUTHORIZATION_CODES
        for key, codes in got.items()
    }
    ours = {ApiKey(key).name: set() if code is None else {code} for key, code in DENIED.items()}
    differ = {name: (ours[name], theirs[name]) for name in ours if ours[name] != theirs[name]}
    assert not differ, differ


@pytest.mark.parametrize("version", [9, 12])
def test_a_transactional_batch_needs_write_on_its_transactional_id(
    secured: tuple[Any, Path], version: int
) -> None:
    """Kafka checks the transactional id only when a batch is transactional; then every
    partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and nothing is written: at
    version 12 (transaction version 2) not even the implicit add to the transaction."""
    from kafkalog import MemoryRecords
    from server_helpers import produce_body

    server, data = secured
    before = _files(data)
    records = bytes(MemoryRecords.build([Record(b"x")], producer_id=7, producer_epoch=0,
                                        base_sequence=0, is_transactional=True))  # fmt: skip
    body = dataclasses.replace(produce_body(version, "t", 0, records), transactional_id="t")
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=30) as sock:
        _login(sock, "bob", "bob-pw")
        sock.sendall(frame(0, version, body, 7))
        answer = decode_response(0, version, read_frame(sock), header_v1=True)
    assert _codes(answer) == {TXN_DENIED}
    assert _files(data) == before
