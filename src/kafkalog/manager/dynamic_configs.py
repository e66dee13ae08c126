"""Configs changed at run time, as a LogManager keeps and applies them.

Why: ``kafka-configs --alter`` through kafkalog serve changes a topic's overrides, a level of
broker keys (every broker's, or one node's) or a group's keys; each must be on disk before the
answer, never say in memory what the files do not (a full disk), and, for topic keys and the
broker keys that set topic defaults, be in force on the open logs at once. ``DynamicConfigs``
holds the broker levels and groups; ``RunTimeConfigs`` is the LogManager's part that changes
any of them. Refuses: checking broker and group values (Kafka's rules are the server's,
``dynamic_broker_config`` and ``coordinator.group_config``) and acting on broker keys that set
no topic default.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafkalog.errors import UnknownTopicOrPartitionError
from kafkalog.log.config import LogConfig, check_remote_storage
from kafkalog.manager.config_ops import AlterConfigOp, altered, as_ops
from kafkalog.manager.kraft_configs import KRaftConfigs
from kafkalog.manager.manager_part import ManagerPart
from kafkalog.manager.server_config import under_dynamic_broker_configs

logger = logging.getLogger("kafkalog.manager")

Levels = dict[str, dict[str, str]]


class DynamicConfigs:
    """Broker levels (``""`` every broker, else a node id) and groups, each to its keys;
    ``write`` persists both (every log directory's file). Not thread-safe: the manager's lock
    serialises the calls."""

    def __init__(self, stored: KRaftConfigs, write: Callable[[Levels, Levels], None]) -> None:
        self._brokers: Levels = {level: dict(c) for level, c in stored.brokers.items()}
        self._groups: Levels = {group: dict(c) for group, c in stored.groups.items()}
        self._write = write

    def broker(self, level: str) -> dict[str, str]:
        return dict(self._brokers.get(level, {}))

    def group(self, group: str) -> dict[str, str]:
        return dict(self._groups.get(group, {}))

    def set_broker(self, level: str, values: Mapping[str, str]) -> None:
        """Persisted first; if the write fails nothing changes."""
        brokers = {**self._brokers, level: dict(values)}
        self._write(brokers, self._groups)
        self._brokers = brokers

    def set_group(self, group: str, values: Mapping[str, str]) -> None:
        """Persisted first (no values: the group's keys removed); if the write fails nothing
        changes."""
        groups = {g: c for g, c in self._groups.items() if g != group}
        if values:
            groups[group] = dict(values)
        self._write(self._brokers, groups)
        self._groups = groups


class RunTimeConfigs(ManagerPart):
    """The LogManager's config changes at run time: a topic's overrides (``kafka-configs
    --entity-type topics``), broker levels and groups; each persisted, then in force on the
    open logs. A part of LogManager, apart for size: it uses the manager's lock, logs and
    directories."""

    _dynamic: DynamicConfigs
    _own_level: str  # this node's id: its broker level
    _static_default_config: LogConfig
    dynamic_broker_configs: tuple[Mapping[str, str], Mapping[str, str]]

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic's persisted config overrides (Kafka property names)."""
        with self._lock:
            return dict(self._topic_configs.get(topic, {}))

    def topic_config(self, topic: str) -> LogConfig:
        """The topic's config: the manager's defaults plus its persisted overrides."""
        overrides = self._topic_configs.get(topic, {})
        return LogConfig.from_properties(overrides, defaults=self.default_config)

    def alter_topic_config(
        self,
        topic: str,
        updates: Mapping[str, Any] | Iterable[AlterConfigOp],
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Change a topic's overrides (``kafka-configs --alter``, KIP-339): ``{key: value}``
        sets, ``{key: None}`` deletes, ``AlterConfigOp``s also APPEND/SUBTRACT list values;
        ``replace`` makes the SETs the whole new set (the legacy AlterConfigs). The result is
        persisted, then applied to the open logs at once. Returns the new overrides."""
        with self._lock:
            self._check_open()
            if not any(
                tp.topic == topic
                for tp in [*self._logs, *self._unopened, *self._offline.partitions]
            ):
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            current = self._topic_configs.get(topic, {})
            new = altered(current, as_ops(updates), self.default_config, replace=replace)
            check_remote_storage(
                LogConfig.from_properties(new, defaults=self.default_config),
                system_enable=self.config.remote.remote_log_storage_system_enable,
                was_enabled=self.topic_config(topic).remote_storage_enable,
            )
            if validate_only or new == current:
                return new
            self._topic_configs[topic] = new
            try:
                self._write_topic_configs()
            except BaseException:  # a full disk: memory must not say what the files do not
                self._topic_configs[topic] = current
                raise
            config = self.topic_config(topic)
            for tp, (log, _) in self._logs.items():
                if tp.topic == topic:
                    log.update_config(config)
            logger.info("altered the config of topic %r: %s", topic, new)
            return new

    def broker_configs(self, level: str) -> dict[str, str]:
        """The broker keys set at run time for ``level``: ``""`` every broker, else a node id."""
        with self._lock:
            return self._dynamic.broker(level)

    def alter_broker_configs(self, level: str, values: Mapping[str, str]) -> None:
        """Make ``values`` the keys set at run time for ``level`` (``kafka-configs
        --entity-type brokers``; the server checked them by Kafka's rules). Persisted first,
        then the topic defaults among them are in force on every open log at once."""
        with self._lock:
            self._check_open()
            self._dynamic.set_broker(level, values)
            self.dynamic_broker_configs = (
                self._dynamic.broker(""),
                self._dynamic.broker(self._own_level),
            )
            self.default_config = under_dynamic_broker_configs(
                self._static_default_config, *self.dynamic_broker_configs
            )
            for tp, (log, _) in self._logs.items():
                config = self.topic_config(tp.topic)
                if config != log.config:
                    log.update_config(config)
            logger.info("broker configs set at run time for %s: %s",
                        "every broker" if level == "" else f"broker {level}", values)  # fmt: skip

    def group_configs(self, group: str) -> dict[str, str]:
        """The group's own configs (``kafka-configs --entity-type groups``)."""
        with self._lock:
            return self._dynamic.group(group)

    def alter_group_configs(self, group: str, values: Mapping[str, str]) -> None:
        """Make ``values`` the group's own configs (checked by the caller), persisted."""
        with self._lock:
            self._check_open()
            self._dynamic.set_group(group, values)

    def _write_dynamic_configs(
        self, brokers: Mapping[str, Mapping[str, str]], groups: Mapping[str, Mapping[str, str]]
    ) -> None:
        for d in self._dirs:
            d.write_dynamic_configs(brokers, groups)
