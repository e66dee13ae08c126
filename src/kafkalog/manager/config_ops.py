"""Altering a topic's config overrides: Kafka's four operations, as pure functions.

Why: ``kafka-configs --alter``, ``AdminClient.incrementalAlterConfigs`` (KIP-339) and the
older whole-set AlterConfigs all end in one new set of overrides, and the rules are easy to get
subtly different from Kafka's (APPEND starts from the default when the key has no override;
SUBTRACT from a key that is not there is no error; APPEND is refused for a non-list key). Here
the rule is plain data in, the new overrides out, so each case is a line of a test.

Refuses: writing anything (the LogManager persists and applies the result) and accepting an
unknown key, a duplicated key, or a value the topic config would not parse.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog.config_def import Type, render
from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import TOPIC_CONFIG, LogConfig


class AlterConfigOpType(enum.IntEnum):
    """Kafka's AlterConfigOp.AlterConfigOpType, with its wire ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    name: str
    op: AlterConfigOpType
    value: str | None = None


def as_ops(updates: Mapping[str, Any] | Iterable[AlterConfigOp]) -> list[AlterConfigOp]:
    """A mapping is the Python form: ``{key: value}`` sets, ``{key: None}`` deletes."""
    if isinstance(updates, Mapping):
        set_, delete = AlterConfigOpType.SET, AlterConfigOpType.DELETE
        return [
            AlterConfigOp(k, delete) if v is None else AlterConfigOp(k, set_, render(v))
            for k, v in ((str(k), v) for k, v in updates.items())
        ]
    ops = list(updates)
    for op in ops:
        if not isinstance(op, AlterConfigOp):
            raise InvalidConfigError("config", f"an alteration is a AlterConfigOp, not {op!r}")
    return ops


def altered(
    current: Mapping[str, str],
    ops: Iterable[AlterConfigOp],
    defaults: LogConfig,
    *,
    replace: bool = False,
) -> dict[str, str]:
    """The overrides after ``ops`` (Kafka's ConfigAdminManager.prepareIncrementalConfigs);
    ``replace``: the legacy AlterConfigs, whose SETs are the whole new set. The result is
    checked by parsing it as the topic's config."""
    ops = list(ops)
    for op in ops:
        if op.name not in TOPIC_CONFIG.keys:
            raise InvalidConfigError(op.name, f"Unknown topic config name: {op.name}")

    def list_default(name: str) -> str | None:
        if TOPIC_CONFIG.keys[name].type is not Type.LIST:
            return None
        return defaults.to_properties()[name]

    out = applied(current, ops, list_default, replace=replace)
    LogConfig.from_properties(out, defaults=defaults)  # refuse what the topic would not parse
    return out


def applied(
    current: Mapping[str, str],
    ops: Iterable[AlterConfigOp],
    list_default: Callable[[str], str | None],
    *,
    replace: bool = False,
) -> dict[str, str]:
    """Kafka's four operations on any resource's keys: ``list_default(name)`` is where an
    APPEND or SUBTRACT on an unset key starts, None for a key that is not a list (refused, in
    Kafka's words); it may raise for a key it does not know. A duplicated key is refused."""
    ops = list(ops)
    names = [op.name for op in ops]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise InvalidConfigError(duplicated[0], "Error due to duplicate config keys")
    out: dict[str, str] = {} if replace else dict(current)
    for op in ops:
        if op.op is AlterConfigOpType.DELETE:
            out.pop(op.name, None)
            continue
        if op.value is None:
            raise InvalidConfigError(op.name, f"Null value not supported for : {op.name}")
        if op.op is AlterConfigOpType.SET:
            out[op.name] = op.value
            continue
        default = list_default(op.name)
        if default is None:
            verb = "append" if op.op is AlterConfigOpType.APPEND else "subtract"
            raise InvalidConfigError(
                op.name, f"Config value {verb} is not allowed for config key: {op.name}"
            )
        old = [v for v in out.get(op.name, default).split(",") if v]
        given = [v.strip() for v in op.value.split(",") if v.strip()]
        if op.op is AlterConfigOpType.APPEND:
            new = old + [v for v in given if v not in old]
        else:
            new = [v for v in old if v not in given]
        out[op.name] = ",".join(new)
    return out
