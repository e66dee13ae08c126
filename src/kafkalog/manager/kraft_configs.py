"""Topic configs, dynamic broker defaults, ACLs and client quotas from a KRaft node's metadata
log.

Why: a Kafka broker keeps each topic's config overrides (cleanup.policy, retention.ms ...) in
its metadata log, ``__cluster_metadata-0``, not beside the partitions, and so the broker-wide
defaults set at run time (``kafka-configs --entity-type brokers [--entity-default] --alter``,
``log.retention.ms`` ...). A LogManager opening the directory of such a broker would otherwise
apply its own defaults: seven days of retention to a compacted or a keep-forever topic,
deleting what Kafka would have kept. The latest snapshot and the records after it are replayed
(``records.kraft_metadata``). Refuses: writing anything there; topic keys or values kafkalog's
LogConfig does not accept, and broker values that do not parse (each left out, with a
warning); broker keys that set no topic default (threads, listeners ...), which are not ours,
and ``log.message.format.version``, which Kafka takes from server.properties only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from kafkalog.errors import KafkaLogError
from kafkalog.log.config import TOPIC_CONFIG, LogConfig
from kafkalog.log.view import PartitionView
from kafkalog.manager.server_config import DYNAMIC_TOPIC_DEFAULTS, under_dynamic_broker_configs
from kafkalog.records import MemoryRecords
from kafkalog.records.kraft_metadata import QuotaEntity, replay_configs
from kafkalog.records.scanner import AnyBatch

logger = logging.getLogger("kafkalog.manager")

_SNAPSHOT_SUFFIX = ".checkpoint"  # <end offset, 20 digits>-<epoch, 10 digits>.checkpoint


class KRaftConfigs(NamedTuple):
    topics: dict[str, dict[str, str]]  # topic name -> the overrides kafkalog's LogConfig takes
    # dynamic broker configs: (every broker's, the node's own), Kafka's DYNAMIC_DEFAULT_BROKER_
    # and DYNAMIC_BROKER_CONFIG sources
    broker_layers: tuple[dict[str, str], dict[str, str]]
    # the ACLs in force, as AccessControlEntryRecord fields (the server's acl_store reads them)
    acls: tuple[dict[str, Any], ...] = ()
    quotas: Mapping[QuotaEntity, Mapping[str, float]] = MappingProxyType({})  # client quotas
    # kafkalog's own dynamic configs, when its file holds them (log_dir.DYNAMIC_CONFIGS_FILE):
    # broker level ("" for every broker, else a node id) -> keys, and group -> keys
    brokers: Mapping[str, Mapping[str, str]] = MappingProxyType({})
    groups: Mapping[str, Mapping[str, str]] = MappingProxyType({})


def kraft_configs(metadata_dir: Path, node_id: int | None = None) -> KRaftConfigs:
    """What the metadata log in ``metadata_dir`` (a ``__cluster_metadata-0`` directory) holds:
    each topic's overrides and the dynamic broker configs that set topic defaults, those for
    every broker and then node ``node_id``'s. What it cannot read is named in a warning: a
    record is skipped, damage ends the replay, and a file it cannot open leaves nothing."""
    try:
        replayed = replay_configs(_batches(metadata_dir))
    except OSError as err:
        logger.warning("cannot read topic configs from %s: %s", metadata_dir, err)
        return KRaftConfigs({}, ({}, {}))
    for problem in replayed.problems:
        logger.warning("metadata log %s: %s", metadata_dir, problem)
    node = replayed.brokers.get(str(node_id), {}) if node_id is not None else {}
    layers = (_topic_defaults(replayed.brokers.get("", {}), ""), _topic_defaults(node, node_id))
    for name, layer in zip(("every broker", f"broker {node_id}"), layers, strict=True):
        if layer:  # over server.properties: say so, kafkalog serve cannot alter them
            logger.info("topic defaults set at run time for %s, in %s: %s", name, metadata_dir,
                        ", ".join(f"{k}={v}" for k, v in sorted(layer.items())))  # fmt: skip
    return KRaftConfigs(_usable(replayed.topics), layers, tuple(replayed.acls), replayed.quotas)


def _batches(metadata_dir: Path) -> Iterator[AnyBatch]:
    """The latest snapshot's batches, then the log's from the snapshot's end offset."""
    snapshots = sorted(p for p in metadata_dir.iterdir() if p.name.endswith(_SNAPSHOT_SUFFIX))
    start = 0
    if snapshots:
        latest = snapshots[-1]  # names sort by end offset
        start = int(latest.name.partition("-")[0])
        yield from MemoryRecords(latest.read_bytes()).batches()
    view = PartitionView(metadata_dir)
    yield from view.batches(max(start, view.log_start_offset()))


def _usable(configs: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Each topic's keys that kafkalog's LogConfig takes as they are."""
    out: dict[str, dict[str, str]] = {}
    for topic, values in configs.items():
        kept = {}
        for key, value in values.items():
            try:
                if key not in TOPIC_CONFIG.keys:
                    raise KafkaLogError(f"{key} is not a topic config kafkalog knows")
                LogConfig.from_properties({key: value})
            except KafkaLogError as err:
                logger.warning("topic %s: leaving out %s=%s from the metadata log: %s",
                               topic, key, value, err)  # fmt: skip
                continue
            kept[key] = value
        out[topic] = kept
    return out


def _topic_defaults(values: dict[str, str], broker: int | str | None) -> dict[str, str]:
    """The dynamic broker keys that set a topic default, each of a value that parses."""
    kept = {}
    for key, value in values.items():
        if key not in DYNAMIC_TOPIC_DEFAULTS:
            continue
        try:
            under_dynamic_broker_configs(LogConfig(), {key: value})
        except KafkaLogError as err:
            logger.warning("broker %r: leaving out %s=%s from the metadata log: %s",
                           "<default>" if broker == "" else broker, key, value, err)  # fmt: skip
            continue
        kept[key] = value
    return kept
