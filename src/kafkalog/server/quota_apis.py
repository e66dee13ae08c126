"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the client quotas of ``kafka-configs
--entity-type users|clients`` and the Admin APIs, as Kafka's ClientQuotasImage and
ClientQuotaControlManager answer them.

Why: a shared broker's operators set quotas with the tools they use on Kafka. Describing needs
DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS; a change is durable in the first log
directory before it is answered and applies to the next request of every client. Refuses,
with Kafka's INVALID_REQUEST and words: bad filters (a type twice, a match string where none
belongs), and per entry, bad entities, unknown keys and values that are not positive (or not
whole, for the byte rates).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.quotas import (
    CLIENT_ID,
    IP,
    USER,
    Entity,
    entity_of,
    invalid_entity,
    invalid_value,
    save_quotas,
)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class _BadFilter(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _selector(components: Any) -> tuple[dict[str, str | None], set[str]]:
    """The exact names and the types a DescribeClientQuotas filter asks for."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        kind = c.entity_type
        if not kind:
            raise _BadFilter(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in exact or kind in typed:
            raise _BadFilter(
                ErrorCode.invalid_request,
                f"Entity type {kind} cannot appear more than once in the filter.",
            )
        if kind not in (USER, CLIENT_ID, IP):
            raise _BadFilter(ErrorCode.unsupported_version, f"Unsupported entity type {kind}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _BadFilter(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                )
            exact[kind] = c.match
        elif c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if c.match is not None:
                which = "DEFAULT" if c.match_type == MATCH_DEFAULT else "SPECIFIED"
                raise _BadFilter(
                    ErrorCode.invalid_request,
                    f"Request specified MATCH_TYPE_{which}, but also specified a match string.",
                )
            if c.match_type == MATCH_DEFAULT:
                exact[kind] = None
            else:
                typed.add(kind)
        else:
            raise _BadFilter(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
    return exact, typed


def _matches(entity: Entity, exact: dict[str, str | None], typed: set[str], strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(typed):
        return False
    if any(kind not in names or names[kind] != name for kind, name in exact.items()):
        return False
    return all(kind in names for kind in typed)


def handle_describe_client_quotas(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, request.api_version, True)
    if not ctx.allowed(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return make(
            mod, "DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.", entries=None,
        )  # fmt: skip
    try:
        exact, typed = _selector(request.body.components)
    except _BadFilter as bad:
        return make(
            mod, "DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
            error_code=bad.code, error_message=str(bad), entries=None,
        )  # fmt: skip
    entries = tuple(
        make(
            mod,
            "EntryData",
            entity=tuple(
                make(mod, "EntityData", entity_type=kind, entity_name=name) for kind, name in entity
            ),
            values=tuple(
                make(mod, "ValueData", key=key, value=value)
                for key, value in sorted(values.items())
            ),
        )
        for entity, values in sorted(ctx.quotas.quotas().items(), key=lambda e: repr(e[0]))
        if _matches(entity, exact, typed, request.body.strict)
    )
    return make(
        mod, "DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none, error_message=None, entries=entries,
    )  # fmt: skip


def _problem(entity: Entity, ops: Any) -> str | None:
    problem = invalid_entity(entity)
    if problem is not None:
        return problem
    keys = [op.key for op in ops]
    if len(set(keys)) != len(keys):
        return "Invalid quota configuration, duplicate key"
    for op in ops:
        if not op.remove:
            problem = invalid_value(op.key, float(op.value))
            if problem is not None:
                return problem
    return None


def handle_alter_client_quotas(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.ALTER_CLIENT_QUOTAS, request.api_version, True)
    body = request.body
    allowed = ctx.allowed(request, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    outcomes: list[tuple[ErrorCode, str | None]] = []
    manager = ctx.quotas
    with manager.lock:
        changed = manager.quotas()
        for entry in body.entries:
            if not allowed:
                outcomes.append(
                    (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
                )
                continue
            entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
            problem = _problem(entity, entry.ops)
            if problem is not None:
                outcomes.append((ErrorCode.invalid_request, problem))
                continue
            values = changed.setdefault(entity, {})
            for op in entry.ops:
                if op.remove:
                    values.pop(op.key, None)
                else:
                    values[op.key] = float(op.value)
            outcomes.append((ErrorCode.none, None))
        changed = {entity: values for entity, values in changed.items() if values}
        if allowed and not body.validate_only and changed != manager.quotas():
            try:
                save_quotas(ctx.manager.log_dirs[0], changed)  # durable before anyone is told
            except KafkaLogError as err:
                code = error_code(err)
                outcomes = [(code, str(err)) if c is ErrorCode.none else (c, m)
                            for c, m in outcomes]  # fmt: skip
            else:
                manager.replace(changed)
    return make(
        mod,
        "AlterClientQuotasResponse",
        throttle_time=NO_THROTTLE,
        entries=tuple(
            make(
                mod,
                "EntryData",
                error_code=code,
                error_message=message,
                entity=tuple(
                    make(mod, "EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
            for entry, (code, message) in zip(body.entries, outcomes, strict=True)
        ),
    )
