"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: a topic's configuration as Kafka
reports and changes it.

Why: ``kafka-topics --describe`` and ``kafka-configs --describe`` show a topic's overrides and
``AdminClient.describe_configs`` shows every key; both read this answer. A key's source is
Kafka's (``manager/config_sources.py``): the topic's own override, a default a Kafka broker
set at run time for itself or for every broker (read from its metadata log), a
``server.properties`` default, each named by its broker synonym, or Kafka's default.

An alteration (``kafka-configs --alter``, KIP-339's incremental form or the legacy whole-set
form) is persisted and applied to the open logs before the answer (``LogManager``).

A broker resource is described by the broker keys that set topic defaults (``log.retention.ms``
...) and the other keys Kafka changes at run time, with Kafka's sources: ``server.properties``,
Kafka's defaults, and the run-time configs for this broker or every broker. Those are altered
as Kafka alters them (``manager/dynamic_broker_config.py`` has its rules), kept in kafkalog's files
(seeded from a Kafka broker's metadata log) and, for the keys that set topic defaults, in force
on the open logs at once. A group resource is described as a Kafka 4 broker describes any
group: every group key (``coordinator/group_config.py``) with the group's own value or its
broker default; a group's own values are altered and checked as Kafka's GroupConfig does.

Refuses: broker resources other than this broker, with Kafka's INVALID_REQUEST, and resource
types it does not keep (client metrics), with INVALID_REQUEST too; acting on run-time broker
keys that set no topic default (thread pools, listeners, SSL and SASL per listener, connection
limits): they are kept and described, and kafkalog serve reads those from
``server.properties`` at start-up; describing broker keys that set no topic default and were
not set at run time (Kafka describes every key it has).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.config_def import ConfigKey, Type
from kafkalog.coordinator.group_config import (
    GROUP_CONFIG,
    altered_group_configs,
    check_group_configs,
    group_config_default,
)
from kafkalog.errors import InvalidConfigError, KafkaLogError
from kafkalog.log.config import REMOVED_IN_KAFKA_4, TOPIC_CONFIG
from kafkalog.manager.config_ops import AlterConfigOp, AlterConfigOpType
from kafkalog.manager.config_sources import (
    BROKER_TOPIC_DEFAULTS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_KEY_OF,
    Synonym,
    broker_config_synonyms,
    config_source,
    topic_config_synonyms,
)
from kafkalog.manager.config_sources import (
    GROUP_CONFIG as GROUP_CONFIG_SOURCE,
)
from kafkalog.manager.dynamic_broker_config import (
    altered_broker_configs,
    base_name,
    check_broker_configs,
)
from kafkalog.manager.kafka_broker_keys import (
    DYNAMIC_BROKER_DEFAULTS,
    DYNAMIC_BROKER_KEYS,
    REPLICATION_QUOTA_KEYS,
)
from kafkalog.manager.server_config import DYNAMIC_TOPIC_DEFAULTS
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext

TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE = 2, 4, 32
# ConfigResource types whose configs the cluster's ACLs guard: BROKER, BROKER_LOGGER and
# CLIENT_METRICS (an unknown type is INVALID_REQUEST, not a refusal, as in Kafka)
_CLUSTER_RESOURCES = frozenset({BROKER_RESOURCE, 8, 16})
# Kafka's DescribeConfigsResponse.ConfigType
_CONFIG_TYPES = {
    Type.BOOLEAN: 1,
    Type.STRING: 2,
    Type.INT: 3,
    Type.LONG: 5,
    Type.DOUBLE: 6,
    Type.LIST: 7,
}
_WIRE_TYPES = {  # Kafka's ConfigDef.Type name -> DescribeConfigsResponse.ConfigType
    "BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7,
    "CLASS": 8, "PASSWORD": 9,
}  # fmt: skip
_OP_IDS = frozenset(op.value for op in AlterConfigOpType)


class _Refusal(Exception):
    """An alteration refused with Kafka's error code and words."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.invalid_request) -> None:
        super().__init__(message)
        self.code = code


def handle_describe_configs(ctx: BrokerContext, request: Request) -> Any:
    body, version = request.body, request.api_version
    mod = payload_module(ApiKey.DESCRIBE_CONFIGS, version, True)
    results = []
    for resource in body.resources:
        code, message, configs = ErrorCode.none, None, ()
        try:
            refused = _refused(ctx, request, resource, AclOperation.DESCRIBE_CONFIGS)
            if refused is not None:
                code, message = refused
            elif resource.resource_type == TOPIC_RESOURCE:
                configs = _topic_configs(ctx, mod, resource, body)
            elif resource.resource_type == BROKER_RESOURCE and resource.resource_name in (
                "",
                str(ctx.settings.node_id),
            ):
                configs = _broker_configs(ctx, mod, resource, body)
            elif resource.resource_type == GROUP_RESOURCE:
                configs = _group_configs(ctx, mod, resource, body)
            else:
                code = ErrorCode.invalid_request
                message = (
                    f"kafkalog describes topics, groups and broker {ctx.settings.node_id} only, "
                    f"not resource type {resource.resource_type} {resource.resource_name!r}"
                )
        except KafkaLogError as err:
            code, message = error_code(err), str(err)
        results.append(
            make(
                mod,
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return make(mod, "DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


def _topic_configs(ctx: BrokerContext, mod: Any, resource: Any, body: Any) -> tuple[Any, ...]:
    topic = resource.resource_name
    ctx.manager.get_log(topic, 0)  # UNKNOWN_TOPIC_OR_PARTITION for a missing topic
    overrides = ctx.manager.topic_overrides(topic)
    values = ctx.manager.topic_config(topic).to_properties()
    wanted = resource.configuration_keys
    dynamic = ctx.manager.dynamic_broker_configs
    out = []
    for name, key in sorted(TOPIC_CONFIG.keys.items()):
        if (wanted is not None and name not in wanted) or name.startswith("internal."):
            continue  # Kafka describes no internal config
        if name in REMOVED_IN_KAFKA_4 and name not in overrides:
            continue
        synonyms = topic_config_synonyms(name, overrides, dynamic, ctx.broker_properties)
        out.append(_entry(mod, body, name, values.get(name), synonyms, False, key))
    return tuple(out)


def _broker_configs(ctx: BrokerContext, mod: Any, resource: Any, body: Any) -> tuple[Any, ...]:
    """The broker keys that set topic defaults, as Kafka describes them: for this broker,
    each with its value and source (read-only where Kafka cannot change it at run time); for
    every broker (the empty name), only those set at run time for every broker."""
    every = resource.resource_name == ""
    wanted = resource.configuration_keys
    dynamic = ctx.manager.dynamic_broker_configs
    out = []
    for name in BROKER_TOPIC_DEFAULTS:
        if wanted is not None and name not in wanted:
            continue
        synonyms = broker_config_synonyms(name, dynamic, ctx.broker_properties)
        if every and config_source(synonyms) != DYNAMIC_DEFAULT_BROKER_CONFIG:
            continue
        topic_key, factor = TOPIC_KEY_OF[name]
        key = TOPIC_CONFIG.keys[topic_key]
        key = key if factor == 1 else dataclasses.replace(key, type=Type.INT)  # hours, minutes
        value = synonyms[0][1] if synonyms else None
        read_only = name not in DYNAMIC_TOPIC_DEFAULTS
        out.append(_entry(mod, body, name, value, synonyms, read_only, key))
    every_level, own_level = dynamic
    # the other keys Kafka changes at run time: all of them for this broker, those set for
    # every broker for the empty name; a key Kafka does not define is kept, not described
    set_here = {*every_level} if every else {*every_level, *own_level}
    names = set_here if every else set_here | (DYNAMIC_BROKER_KEYS.keys() - REPLICATION_QUOTA_KEYS)
    for name in sorted(names - set(BROKER_TOPIC_DEFAULTS)):
        if base_name(name) in DYNAMIC_BROKER_KEYS and (wanted is None or name in wanted):
            out.append(_run_time_entry(ctx, mod, body, name, every))
    return tuple(out)


def _run_time_entry(ctx: BrokerContext, mod: Any, body: Any, name: str, every: bool) -> Any:
    """A broker key set at run time that sets no topic default, with its layers' synonyms
    (this broker's, every broker's, ``server.properties``', Kafka's default)."""
    every_level, own_level = ctx.manager.dynamic_broker_configs
    static = ctx.broker_properties
    layers: list[tuple[Mapping[str, Any], int]] = (
        [] if every else [(own_level, DYNAMIC_BROKER_CONFIG)]
    )
    layers += [(every_level, DYNAMIC_DEFAULT_BROKER_CONFIG), (static, STATIC_BROKER_CONFIG)]
    synonyms: list[Synonym] = [
        (name, str(layer[name]), source) for layer, source in layers if name in layer
    ]
    default = DYNAMIC_BROKER_DEFAULTS.get(base_name(name))
    if default is not None:  # Kafka gives no synonym for a null default
        synonyms.append((base_name(name), default, DEFAULT_CONFIG))
    type_ = DYNAMIC_BROKER_KEYS[base_name(name)][0]
    sensitive = type_ == "PASSWORD"
    return make(
        mod,
        "DescribeConfigsResourceResult",
        name=name,
        value=None if sensitive or not synonyms else synonyms[0][1],
        read_only=False,
        config_source=synonyms[0][2] if synonyms else DEFAULT_CONFIG,
        is_sensitive=sensitive,
        synonyms=tuple(
            make(mod, "DescribeConfigsSynonym", name=n, value=None if sensitive else v, source=s)
            for n, v, s in synonyms
        )
        if getattr(body, "include_synonyms", False)
        else (),
        config_type=_WIRE_TYPES.get(type_, 0),
        documentation=None,
    )


def _group_configs(ctx: BrokerContext, mod: Any, resource: Any, body: Any) -> tuple[Any, ...]:
    """Every group key with the broker's default for it, as Kafka describes any group, one
    it knows or not (kafkalog keeps no per-group value: the classic protocol reads none)."""
    wanted = resource.configuration_keys
    own = ctx.manager.group_configs(resource.resource_name)
    out = []
    for name, (_, key) in sorted(GROUP_CONFIG.items()):
        if wanted is not None and name not in wanted:
            continue
        broker, value = group_config_default(name, ctx.broker_properties)
        synonyms: list[Synonym] = [(broker, value, DEFAULT_CONFIG)]
        if name in own:
            value = own[name]
            synonyms.insert(0, (name, value, GROUP_CONFIG_SOURCE))
        out.append(_entry(mod, body, name, value, synonyms, False, key))
    return tuple(out)


def _entry(
    mod: Any,
    body: Any,
    name: str,
    value: str | None,
    synonyms: list[Synonym],
    read_only: bool,
    key: ConfigKey,
) -> Any:
    source = config_source(synonyms)
    return make(
        mod,
        "DescribeConfigsResourceResult",
        name=name,
        value=value,
        read_only=read_only,
        config_source=source,
        is_sensitive=False,
        synonyms=tuple(
            make(mod, "DescribeConfigsSynonym", name=n, value=v, source=s) for n, v, s in synonyms
        )
        if getattr(body, "include_synonyms", False)
        else (),
        config_type=_CONFIG_TYPES.get(key.type, 0),
        documentation=key.doc if getattr(body, "include_documentation", False) else None,
    )


def _refused(
    ctx: BrokerContext, request: Request, resource: Any, operation: AclOperation
) -> tuple[ErrorCode, str] | None:
    """The error for a config resource the principal may not describe or alter
    (ConfigAdminManager and AuthHelper): a topic's or group's ACL, the cluster's for a
    broker."""
    kind, name = resource.resource_type, resource.resource_name
    if kind == TOPIC_RESOURCE:
        if not ctx.allowed(request, operation, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed, "Topic authorization failed."
    elif kind == GROUP_RESOURCE:
        if not ctx.allowed(request, operation, ResourceType.GROUP, name):
            return ErrorCode.group_authorization_failed, "Group authorization failed."
    elif kind in _CLUSTER_RESOURCES and not ctx.allowed(
        request, operation, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    return None


def handle_alter_configs(ctx: BrokerContext, request: Request) -> Any:
    """The legacy whole-set form: a topic's overrides become exactly the given entries."""
    return _alter(ctx, request, ApiKey.ALTER_CONFIGS, "AlterConfigsResponse")


def handle_incremental_alter_configs(ctx: BrokerContext, request: Request) -> Any:
    return _alter(ctx, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsResponse")


def _alter(ctx: BrokerContext, request: Request, api_key: int, response: str) -> Any:
    body = request.body
    mod = payload_module(api_key, request.api_version, True)
    incremental = api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
    results = []
    for resource in body.resources:
        code, message = ErrorCode.none, None
        try:
            refused = _refused(ctx, request, resource, AclOperation.ALTER_CONFIGS)
            if refused is not None:
                code, message = refused
            elif resource.resource_type not in (TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE):
                code = ErrorCode.invalid_request
                message = f"Unknown resource type {resource.resource_type}"
            elif incremental and any(c.config_operation not in _OP_IDS for c in resource.configs):
                code, message = ErrorCode.invalid_request, "unknown config operation"
            elif resource.resource_type != TOPIC_RESOURCE:
                _alter_dynamic(ctx, resource, incremental, body.validate_only)
            else:
                ops = [
                    AlterConfigOp(c.name, _op_type(c, incremental), c.value)
                    for c in resource.configs
                    if incremental or c.value is not None
                ]
                ctx.manager.alter_topic_config(
                    resource.resource_name,
                    ops,
                    replace=not incremental,
                    validate_only=body.validate_only,
                )
        except _Refusal as err:
            code, message = err.code, str(err)
        except KafkaLogError as err:
            code, message = error_code(err), str(err)
        results.append(
            make(
                mod,
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(mod, response, throttle_time=NO_THROTTLE, responses=tuple(results))


def _alter_dynamic(
    ctx: BrokerContext, resource: Any, incremental: bool, validate_only: bool
) -> None:
    """A broker's or a group's configs altered as Kafka alters them (ConfigAdminManager's
    preprocessing, then the controller's checks), or a _Refusal in Kafka's words."""
    name = resource.resource_name
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise _Refusal("Error due to duplicate config keys")
    nulls = [
        c.name
        for c in resource.configs
        if c.value is None and _op_type(c, incremental) is not AlterConfigOpType.DELETE
    ]
    if nulls:
        raise _Refusal(f"Null value not supported for : {', '.join(nulls)}")
    ops = [AlterConfigOp(c.name, _op_type(c, incremental), c.value) for c in resource.configs]
    if resource.resource_type == GROUP_RESOURCE:
        if not name:
            raise _Refusal("Group name can't be empty")
        try:
            values = altered_group_configs(
                ctx.manager.group_configs(name), ops, replace=not incremental
            )
            check_group_configs(values, ctx.broker_properties)
        except InvalidConfigError as err:
            raise _Refusal(err.detail, ErrorCode.invalid_config) from None
        if not validate_only:
            ctx.manager.alter_group_configs(name, values)
        return
    if name:
        if not name.isdigit():
            raise _Refusal(f"Node id must be an integer, but it is: {name}")
        if int(name) != ctx.settings.node_id:
            raise _Refusal(
                f"Unexpected broker id, expected {ctx.settings.node_id}, but received {name}"
            )
    try:
        current = ctx.manager.broker_configs(name)
        values = altered_broker_configs(current, ops, replace=not incremental)
    except InvalidConfigError as err:
        raise _Refusal(err.detail, ErrorCode.invalid_config) from None
    try:
        check_broker_configs(values, per_broker=bool(name))
    except InvalidConfigError as err:  # Kafka's INVALID_REQUEST here (KAFKA-13609)
        raise _Refusal(err.detail) from None
    if not validate_only:
        ctx.manager.alter_broker_configs(name, values)


def _op_type(entry: Any, incremental: bool) -> AlterConfigOpType:
    """The legacy AlterConfigs has no operation (nor the field): every entry is a SET."""
    return AlterConfigOpType(entry.config_operation) if incremental else AlterConfigOpType.SET
