"""CreateAcls, DescribeAcls and DeleteAcls: the ACLs of ``kafka-acls.sh`` and the Admin APIs,
as Kafka's AclApis answers them.

Why: the tools a team already uses to manage a Kafka cluster's ACLs must manage kafkalog's.
Creating and deleting need ALTER on the cluster, describing DESCRIBE; a broker without an
authorizer answers SECURITY_DISABLED. A change is durable in the first log directory before
it is answered, and applies to the next request of every connection. Refuses, as Kafka does:
a request with UNKNOWN elements (its connection is closed, as Kafka cannot parse it), and per
creation, a binding AclControlManager would refuse (INVALID_REQUEST with Kafka's message).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import InvalidRequestError, Request, make, payload_module
from kafkalog.server.acl_store import save_acls
from kafkalog.server.authorizer import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
    invalid_binding,
)
from kafkalog.server.context import NO_THROTTLE, BrokerContext

_E = TypeVar("_E", bound=enum.IntEnum)
_NO_AUTHORIZER = "No Authorizer is configured."
_NOT_ALLOWED = "Cluster authorization failed."


def _code(kind: type[_E], value: int) -> _E:
    """Kafka's fromCode: a code it does not know is UNKNOWN (0)."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def _filter(entry: Any) -> AclBindingFilter:
    selector = AclBindingFilter(
        _code(ResourceType, entry.resource_type_filter),
        entry.resource_name_filter,
        _code(PatternType, entry.pattern_type_filter),
        entry.principal_filter,
        entry.host_filter,
        _code(AclOperation, entry.operation),
        _code(AclPermissionType, entry.permission_type),
    )
    if selector.invalid() is not None:
        raise InvalidRequestError(f"an ACL filter with UNKNOWN elements: {entry}")
    return selector


def _refusal(ctx: BrokerContext, request: Request, operation: AclOperation) -> tuple[Any, str]:
    """The whole request's error, if any: the cluster operation first, then no authorizer."""
    if not ctx.allowed(request, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, _NOT_ALLOWED
    if ctx.authorizer is None:
        return ErrorCode.security_disabled, _NO_AUTHORIZER
    return ErrorCode.none, ""


def handle_create_acls(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.CREATE_ACLS, request.api_version, True)
    wanted = []
    for c in request.body.creations:
        acl = AclBinding(
            _code(ResourceType, c.resource_type),
            c.resource_name,
            _code(PatternType, c.resource_pattern_type),
            c.principal,
            c.host,
            _code(AclOperation, c.operation),
            _code(AclPermissionType, c.permission_type),
        )
        if acl.pattern_type == PatternType.UNKNOWN or acl.resource_type == ResourceType.UNKNOWN:
            raise InvalidRequestError(f"an ACL creation with UNKNOWN elements: {c}")
        if acl.operation == AclOperation.UNKNOWN or acl.permission == AclPermissionType.UNKNOWN:
            raise InvalidRequestError(f"an ACL creation with UNKNOWN elements: {c}")
        wanted.append(acl)
    code, message = _refusal(ctx, request, AclOperation.ALTER)
    problems: list[str | None] = [None] * len(wanted)
    if code == ErrorCode.none:
        authorizer = ctx.authorizer
        assert authorizer is not None
        problems = [invalid_binding(acl) for acl in wanted]
        valid = [acl for acl, problem in zip(wanted, problems, strict=True) if problem is None]
        try:
            _change(ctx, authorizer, add=valid)
        except KafkaLogError as err:  # not durable, so not in force: every creation failed
            code, message = error_code(err), str(err)

    def result(problem: str | None) -> Any:
        if code != ErrorCode.none:
            return make(mod, "AclCreationResult", error_code=code, error_message=message)
        if problem is not None:
            return make(
                mod, "AclCreationResult", error_code=ErrorCode.invalid_request,
                error_message=problem,
            )  # fmt: skip
        return make(mod, "AclCreationResult", error_code=ErrorCode.none, error_message=None)

    return make(
        mod, "CreateAclsResponse", throttle_time=NO_THROTTLE,
        results=tuple(result(problem) for problem in problems),
    )  # fmt: skip


def _change(
    ctx: BrokerContext,
    authorizer: StandardAuthorizer,
    add: Iterable[AclBinding] = (),
    remove: frozenset[AclBinding] = frozenset(),
) -> None:
    """Add and remove bindings: durable first, then in force."""
    with authorizer.changing:
        current = set(authorizer.acls())
        changed = (current | set(add)) - remove
        if changed != current:
            save_acls(ctx.manager.log_dirs[0], changed)
            authorizer.replace(changed)


def handle_describe_acls(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_ACLS, request.api_version, True)
    selector = _filter(request.body)
    code, message = _refusal(ctx, request, AclOperation.DESCRIBE)
    resources: list[Any] = []
    if code == ErrorCode.none:
        assert ctx.authorizer is not None
        grouped: dict[tuple[int, str, int], list[Any]] = {}
        for acl in ctx.authorizer.acls(selector):
            key = (acl.resource_type, acl.resource_name, acl.pattern_type)
            grouped.setdefault(key, []).append(
                make(
                    mod,
                    "AclDescription",
                    principal=acl.principal,
                    host=acl.host,
                    operation=int(acl.operation),
                    permission_type=int(acl.permission),
                )
            )
        resources = [
            make(
                mod,
                "DescribeAclsResource",
                resource_type=kind,
                resource_name=name,
                pattern_type=pattern,
                acls=tuple(acls),
            )
            for (kind, name, pattern), acls in grouped.items()
        ]
    return make(
        mod, "DescribeAclsResponse", throttle_time=NO_THROTTLE, error_code=code,
        error_message=message or None, resources=tuple(resources),
    )  # fmt: skip


def handle_delete_acls(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DELETE_ACLS, request.api_version, True)
    selectors = [_filter(entry) for entry in request.body.filters]
    code, message = _refusal(ctx, request, AclOperation.ALTER)
    if code != ErrorCode.none:
        results = tuple(
            make(
                mod,
                "DeleteAclsFilterResult",
                error_code=code,
                error_message=message,
                matching_acls=(),
            )
            for _ in selectors
        )
        return make(mod, "DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=results)
    authorizer = ctx.authorizer
    assert authorizer is not None
    with authorizer.changing:
        current = authorizer.acls()
        matched = [[acl for acl in current if s.matches(acl)] for s in selectors]
        try:
            _change(ctx, authorizer, remove=frozenset(a for found in matched for a in found))
        except KafkaLogError as err:  # not durable, so still in force
            results = tuple(
                make(
                    mod,
                    "DeleteAclsFilterResult",
                    error_code=error_code(err),
                    error_message=str(err),
                    matching_acls=(),
                )
                for _ in selectors
            )
            return make(
                mod, "DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=results
            )

    def matching(acl: AclBinding) -> Any:
        return make(
            mod, "DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
            resource_type=int(acl.resource_type), resource_name=acl.resource_name,
            pattern_type=int(acl.pattern_type), principal=acl.principal, host=acl.host,
            operation=int(acl.operation), permission_type=int(acl.permission),
        )  # fmt: skip

    results = tuple(
        make(
            mod,
            "DeleteAclsFilterResult",
            error_code=ErrorCode.none,
            error_message=None,
            matching_acls=tuple(matching(acl) for acl in found),
        )
        for found in matched
    )
    return make(mod, "DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=results)
