"""StandardAuthorizer's decision, binding by binding, as Kafka's StandardAuthorizerData makes it;
the filters of DescribeAcls and DeleteAcls as Kafka's AclBindingFilter matches; and the ACL
file: durable, refused when damaged, seeded from a KRaft broker's metadata log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog.errors import CorruptCheckpointError
from kafkalog.server.acl_store import FILE_NAME, load_acls, save_acls
from kafkalog.server.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
    invalid_binding,
)
from kafkalog.server.principal import principal_mapper, subject_dn

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE, BOB = "User:alice", "User:bob"


def acl(
    op: AclOperation,
    perm: AclPermissionType = Perm.ALLOW,
    name: str = "orders",
    pattern: PatternType = Pat.LITERAL,
    principal: str = ALICE,
    host: str = "*",
    kind: ResourceType = Res.TOPIC,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, perm)


def may(auth: StandardAuthorizer, op: AclOperation, name: str = "orders", **kw: str) -> bool:
    principal = kw.get("principal", ALICE)
    return auth.authorize(principal, kw.get("host", "10.0.0.1"), op, Res.TOPIC, name)


def test_an_allow_grants_its_operation_and_the_describe_it_implies() -> None:
    auth = StandardAuthorizer([acl(Op.WRITE)])
    assert may(auth, Op.WRITE) and may(auth, Op.DESCRIBE)
    assert not may(auth, Op.READ) and not may(auth, Op.DESCRIBE_CONFIGS)
    assert not may(auth, Op.WRITE, principal=BOB)  # the resource has ACLs: bob has none


def test_alter_configs_implies_describe_configs_and_all_implies_everything() -> None:
    auth = StandardAuthorizer([acl(Op.ALTER_CONFIGS), acl(Op.ALL, principal=BOB)])
    assert may(auth, Op.DESCRIBE_CONFIGS) and not may(auth, Op.DESCRIBE)
    assert all(may(auth, op, principal=BOB) for op in (Op.READ, Op.DELETE, Op.ALTER_CONFIGS))


def test_deny_wins_and_an_implied_operation_never_widens_a_deny() -> None:
    auth = StandardAuthorizer([acl(Op.ALL), acl(Op.WRITE, Perm.DENY)])
    assert not may(auth, Op.WRITE) and may(auth, Op.READ)
    # a DENY of READ does not deny DESCRIBE (StandardAuthorizerData.findResult)
    auth = StandardAuthorizer([acl(Op.DESCRIBE), acl(Op.READ, Perm.DENY)])
    assert may(auth, Op.DESCRIBE) and not may(auth, Op.READ)


def test_prefixed_and_wildcard_patterns_match_as_kafkas() -> None:
    auth = StandardAuthorizer(
        [acl(Op.READ, name="ord", pattern=Pat.PREFIXED), acl(Op.WRITE, name="*")]
    )
    assert may(auth, Op.READ, "orders") and may(auth, Op.READ, "ord")
    assert not may(auth, Op.READ, "or") and not may(auth, Op.READ, "payments")
    assert may(auth, Op.WRITE, "anything")
    # a LITERAL "*" is the wildcard; a PREFIXED "*" is a prefix like any other
    starred = StandardAuthorizer([acl(Op.READ, name="*", pattern=Pat.PREFIXED)])
    assert not may(starred, Op.READ, "orders") and may(starred, Op.READ, "*x")


def test_principal_and_host_wildcards() -> None:
    auth = StandardAuthorizer([acl(Op.READ, principal="User:*"), acl(Op.WRITE, host="10.0.0.9")])
    assert may(auth, Op.READ, principal=BOB)
    assert not may(auth, Op.WRITE) and may(auth, Op.WRITE, host="10.0.0.9")
    # as in Kafka, User:* is in every principal's matching set, whatever its type
    assert may(auth, Op.READ, principal="Group:ops")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    auth = StandardAuthorizer([acl(Op.READ, Perm.DENY)], super_users=[BOB])
    assert may(auth, Op.READ, principal=BOB) and may(auth, Op.DELETE, "x", principal=BOB)
    assert not may(auth, Op.READ, "other")  # no ACL on "other": closed by default
    open_ = StandardAuthorizer([acl(Op.READ)], allow_everyone_if_no_acl_found=True)
    assert may(open_, Op.WRITE, "other", principal=BOB)  # no ACL names "other"
    assert not may(open_, Op.WRITE, principal=BOB)  # "orders" has one: bob is not in it


def test_by_resource_type_finds_a_write_that_no_deny_covers() -> None:
    """KIP-679: an idempotent producer may start if it may write to some topic."""

    def some(auth: StandardAuthorizer) -> bool:
        return auth.authorize_by_resource_type(ALICE, "10.0.0.1", Op.WRITE, Res.TOPIC)

    assert not some(StandardAuthorizer([acl(Op.READ)]))
    assert some(StandardAuthorizer([acl(Op.WRITE)]))
    assert not some(StandardAuthorizer([acl(Op.WRITE), acl(Op.WRITE, Perm.DENY)]))
    covered = [acl(Op.WRITE, name="orders-eu"), acl(Op.WRITE, Perm.DENY, "ord", Pat.PREFIXED)]
    assert not some(StandardAuthorizer(covered))
    assert not some(StandardAuthorizer([acl(Op.WRITE), acl(Op.ALL, Perm.DENY, name="*")]))
    assert some(StandardAuthorizer([acl(Op.ALL, name="*")]))


def test_authorized_operations_report_what_the_principal_may_do() -> None:
    auth = StandardAuthorizer([acl(Op.READ), acl(Op.ALTER_CONFIGS)])
    bits = auth.authorized_operations(ALICE, "h", Res.TOPIC, "orders")
    assert bits == sum(1 << op for op in (Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS,
                                          Op.DESCRIBE_CONFIGS))  # fmt: skip


def test_filters_select_as_kafkas_acl_binding_filter() -> None:
    bindings = [
        acl(Op.READ, name="orders"),
        acl(Op.READ, name="ord", pattern=Pat.PREFIXED),
        acl(Op.WRITE, name="*"),
        acl(Op.READ, kind=Res.GROUP, name="g"),
    ]
    auth = StandardAuthorizer(bindings)

    def names(**kw: object) -> list[str]:
        fields: dict[str, object] = dict(
            resource_type=Res.ANY, resource_name=None, pattern_type=Pat.ANY, principal=None,
            host=None, operation=Op.ANY, permission=Perm.ANY,
        )  # fmt: skip
        fields.update(kw)
        return sorted(a.resource_name for a in auth.acls(AclBindingFilter(**fields)))  # type: ignore[arg-type]

    assert names() == ["*", "g", "ord", "orders"]
    assert names(resource_type=Res.TOPIC, resource_name="orders") == ["orders"]
    assert names(resource_type=Res.TOPIC, resource_name="orders", pattern_type=Pat.MATCH) == [
        "*", "ord", "orders",
    ]  # fmt: skip
    assert names(pattern_type=Pat.PREFIXED) == ["ord"]
    assert names(operation=Op.WRITE) == ["*"]


def test_bindings_kafka_refuses_are_refused_with_its_words() -> None:
    assert invalid_binding(acl(Op.ANY)) == "Invalid operation ANY"
    assert invalid_binding(acl(Op.READ, pattern=Pat.MATCH)) == "Invalid patternType MATCH"
    assert "kafka-cluster" in str(invalid_binding(acl(Op.ALTER, kind=Res.CLUSTER, name="x")))
    assert invalid_binding(acl(Op.READ, name="")) == "Invalid empty resource name"
    assert "no colon" in str(invalid_binding(acl(Op.READ, principal="alice")))
    assert invalid_binding(acl(Op.READ)) is None


bindings = st.builds(
    acl,
    st.sampled_from([Op.READ, Op.WRITE, Op.ALL, Op.DESCRIBE, Op.ALTER_CONFIGS]),
    st.sampled_from([Perm.ALLOW, Perm.DENY]),
    st.sampled_from(["orders", "ord", "o", "*", "pay"]),
    st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
    st.sampled_from([ALICE, BOB, "User:*"]),
    st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
)


@given(st.lists(bindings, max_size=8), st.sampled_from(list(Op)[2:12]))
def test_adding_a_deny_never_grants_and_adding_an_allow_never_takes_away(
    acls: list[AclBinding], op: AclOperation
) -> None:
    """Monotonicity, for a principal on a resource that already has an ACL."""
    base = [*acls, acl(Op.READ, principal="User:someone-else")]
    before = may(StandardAuthorizer(base), op)
    denied = may(StandardAuthorizer([*base, acl(op, Perm.DENY)]), op)
    allowed = may(StandardAuthorizer([*base, acl(op)]), op)
    assert not denied
    assert allowed or not before


def test_the_acl_file_round_trips_and_a_damaged_one_stops_the_start(tmp_path: Path) -> None:
    saved = [acl(Op.READ), acl(Op.WRITE, Perm.DENY, "ord", Pat.PREFIXED, BOB, "10.0.0.2")]
    save_acls(tmp_path, saved)
    assert sorted(load_acls(tmp_path)) == sorted(saved)
    raw = json.loads((tmp_path / FILE_NAME).read_text())
    raw["acls"][0]["operation"] = 99
    (tmp_path / FILE_NAME).write_text(json.dumps(raw))
    with pytest.raises(CorruptCheckpointError):
        load_acls(tmp_path)
    (tmp_path / FILE_NAME).write_bytes(b'{"acls": [')
    with pytest.raises(CorruptCheckpointError):
        load_acls(tmp_path)


def test_without_a_file_the_kraft_metadata_logs_acls_are_in_force(tmp_path: Path) -> None:
    record = {"resourceType": 2, "resourceName": "orders", "patternType": 3, "host": "*",
              "principal": "User:alice", "operation": 3, "permissionType": 3}  # fmt: skip
    wrong = {**record, "patternType": 1}  # ANY: never stored by Kafka; left out, warned
    assert load_acls(tmp_path, [record, wrong]) == [acl(Op.READ)]
    save_acls(tmp_path, [])
    assert load_acls(tmp_path, [record]) == []  # the file, once written, is the truth


def test_tls_subjects_map_as_kafkas_ssl_principal_mapper() -> None:
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                        (("commonName", "alice"),))}  # fmt: skip
    dn = subject_dn(cert)
    assert dn == "CN=alice,O=Acme\\, Inc,C=US"
    assert principal_mapper("DEFAULT")(dn) == dn
    rules = "RULE:^CN=(.*?),O=(.*?),C=US$/$1@$2/L,RULE:^CN=([^,]*).*$/$1/U,DEFAULT"
    assert principal_mapper(rules)(dn) == "alice@acme\\, inc"
    assert principal_mapper("RULE:^CN=([^,]*),O=.*$/$1/U")(dn) == "ALICE"
    assert principal_mapper("RULE:^CN=bob.*$/bob/")(dn) is None


@given(st.lists(bindings, max_size=12), st.sampled_from(["orders", "ord", "o", "*", "pay", "x"]))
def test_the_index_finds_exactly_the_bindings_whose_pattern_names_the_resource(
    acls: list[AclBinding], name: str
) -> None:
    """The lookups by name, wildcard and prefix length against the plain rule of each
    binding's pattern."""
    from kafkalog.server.authorizer import _Index

    index = _Index(frozenset(acls))
    expected = {a for a in acls if a.pattern_matches(Res.TOPIC, name)}
    assert set(index.matching(Res.TOPIC, name)) == expected
    assert index.matching(Res.GROUP, name) == []
