"""Who may do what: ACL bindings and the decision Kafka's ``StandardAuthorizer`` makes over them.

Why: a broker several teams share must refuse a principal what its ACLs do not allow, with the
rule a Kafka user already knows, so an ACL set on Kafka means the same on kafkalog and back.
The rule is ``StandardAuthorizerData``'s: super users may do everything; otherwise every ACL
whose pattern matches the resource (LITERAL equal or ``*``, PREFIXED a prefix of the name)
counts; a DENY for the principal (or ``User:*``) and host (or ``*``) wins; an ALLOW for the
operation, or ALL, or one that implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE;
ALTER_CONFIGS implies DESCRIBE_CONFIGS; implication never widens a DENY) allows; a resource
no ACL names at all follows ``allow.everyone.if.no.acl.found``.

Refuses: I/O (acl_store keeps the bindings), a request's shape (the handlers ask), and
bindings Kafka's AclControlManager would refuse (``invalid_binding`` says why).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # a LITERAL name or host that matches every name or host
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
     AclOperation.ALTER}
)  # fmt: skip
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# What each resource type offers, as KafkaApis asks the authorizer for the KIP-430
# ``*_authorized_operations`` fields (AclEntry.supportedOperations)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (
        AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT,
    ),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}  # fmt: skip


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def pattern_matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's pattern names the LITERAL resource (type, name): the rule
        the authorizer's index is checked against."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter): ANY matches every
    type, operation and permission; a None name, principal or host matches every one; pattern
    type MATCH selects the bindings that would apply to the named resource, ANY the ones with
    exactly that name whatever their pattern type."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def invalid(self) -> str | None:
        """Why Kafka refuses this filter (AclControlManager.validateFilter), or None."""
        unknown = (
            self.resource_type == ResourceType.UNKNOWN
            or self.pattern_type == PatternType.UNKNOWN
            or self.operation == AclOperation.UNKNOWN
            or self.permission == AclPermissionType.UNKNOWN
        )
        return "Unknown patternFilter or entryFilter." if unknown else None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(acl.resource_name):
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation not in (AclOperation.ANY, acl.operation):
            return False
        return self.permission in (AclPermissionType.ANY, acl.permission)


def invalid_binding(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (AclApis and AclControlManager.validateNewAcl),
    or None."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {acl.permission.name}"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    kind, colon, _ = acl.principal.partition(":")
    if not colon or not kind:
        return f"Could not parse principal from `{acl.principal}` (no colon is present)"
    return None


def _entry_result(
    acl: AclBinding, principal: str, host: str, operation: AclOperation
) -> AclPermissionType | None:
    """What one matching-pattern ACL says of (principal, host, operation): ALLOW, DENY or
    nothing (StandardAuthorizerData.findResult)."""
    if acl.principal not in (principal, WILDCARD_PRINCIPAL):
        return None
    if acl.host not in (WILDCARD, host):
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission == AclPermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif acl.operation != operation:
                return None
        elif acl.operation != operation:
            return None
    return acl.permission


class _Index:
    """The bindings by what a resource's name looks them up by: its exact name, the wildcard,
    and each prefix length some PREFIXED binding has (StandardAuthorizerData's sorted walk,
    as dictionary lookups: a decision costs the same with ten ACLs or ten thousand)."""

    def __init__(self, acls: frozenset[AclBinding]) -> None:
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for acl in sorted(acls):
            by_type.setdefault(acl.resource_type, []).append(acl)
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            else:
                literal.setdefault(key, []).append(acl)
        self.by_type = {kind: tuple(items) for kind, items in by_type.items()}
        self._literal = {key: tuple(items) for key, items in literal.items()}
        self._prefixed = {key: tuple(items) for key, items in prefixed.items()}
        self._lengths = {kind: sorted(ls) for kind, ls in lengths.items()}

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern names the LITERAL resource (type, name)."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        for length in self._lengths.get(resource_type, ()):
            if length > len(name):
                break
            found += self._prefixed.get((resource_type, name[:length]), ())
        return found


class StandardAuthorizer:
    """The ACL bindings of a broker and the decisions over them. Thread-safe: a change swaps
    the binding set whole, so a decision reads one consistent snapshot without a lock."""

    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: frozenset[AclBinding] = frozenset(acls)
        self._index = _Index(self._acls)
        self._changing = threading.RLock()  # one read-modify-write of the bindings at a time

    @property
    def changing(self) -> threading.RLock:
        """Held by whoever changes the bindings (and makes the change durable first)."""
        return self._changing

    def acls(self, selector: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings, in Kafka's order for a resource, that ``selector`` selects."""
        return [acl for acl in sorted(self._acls) if selector is None or selector.matches(acl)]

    def replace(self, acls: Iterable[AclBinding]) -> None:
        """The binding set from now on (the caller holds ``changing`` and saved it first)."""
        snapshot = frozenset(acls)
        index = _Index(snapshot)
        self._acls, self._index = snapshot, index

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``operation`` on the
        resource (type, name)."""
        if principal in self.super_users:
            return True
        allowed = found = False
        for acl in self._index.matching(resource_type, name):
            found = True
            result = _entry_result(acl, principal, host, operation)
            if result == AclPermissionType.DENY:
                return False
            if result == AclPermissionType.ALLOW:
                allowed = True
        if allowed:
            return True
        return not found and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type
        (KIP-679: an idempotent producer with WRITE on some topic): an ALLOW that no DENY of
        the same or a shorter prefix covers (Kafka's Authorizer.authorizeByResourceType)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        for acl in self._index.by_type.get(resource_type, ()):
            if acl.host not in (host, WILDCARD):
                continue
            if acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                else:
                    deny_prefixed.add(acl.resource_name)
            elif acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                return True
            else:
                allow.append((acl.pattern_type, acl.resource_name))
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:end] in deny_prefixed for end in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The KIP-430 bit field: bit ``op`` set for each operation the resource type offers
        that ``principal`` may do on it."""
        return sum(
            1 << op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name)
        )
