"""One entry of ``log.dirs``: its lock, clean-shutdown marker, checkpoints and topic configs.

Why: Kafka keeps per-directory state beside the partitions: ``.lock`` (so two processes never
own the same data), ``.kafka_cleanshutdown``, and the recovery-point and log-start-offset
checkpoints for every partition in it. Topic config overrides, which a broker keeps in its
metadata log, live here in ``kafkalog-topic-configs.json`` (a file, so a broker opening the
directory ignores it); a topic no such file names takes those of a KRaft node's metadata log,
if there is one (``kraft_configs``). Refuses: opening logs (the manager does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from kafkalog.errors import CorruptCheckpointError, InvalidTopicError, KafkaLogError
from kafkalog.log.log import Log
from kafkalog.manager.kraft_configs import KRaftConfigs, kraft_configs
from kafkalog.storage import filenames as fn
from kafkalog.storage.atomic import delete_if_exists, write_atomically
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.storage.dir_lock import DirectoryLock
from kafkalog.storage.faults import storage_call
from kafkalog.storage.meta_properties import node_id
from kafkalog.types import CLUSTER_METADATA_TOPIC, TopicPartition

logger = logging.getLogger("kafkalog.manager")

TOPIC_CONFIGS_FILE = "kafkalog-topic-configs.json"
# broker and group configs set at run time (Kafka keeps them in its metadata log)
DYNAMIC_CONFIGS_FILE = "kafkalog-dynamic-configs.json"
PartitionDir = tuple[TopicPartition, Path]


class LogDirectory:
    """A locked log directory. Not thread-safe: the manager serialises its calls."""

    def __init__(self, path: Path) -> None:
        self.path = path
        storage_call(path.mkdir, 0o777, True, True, what=f"creating log directory {path}")
        self._lock = DirectoryLock.exclusive(path, "log directory")
        self.recovery_points = OffsetCheckpointFile(path / fn.RECOVERY_POINT_CHECKPOINT)
        self.log_start_offsets = OffsetCheckpointFile(path / fn.LOG_START_OFFSET_CHECKPOINT)
        self.had_clean_shutdown = False
        self._broker_epoch = -1  # the clean-shutdown marker's, kept for the next one
        # checkpoint entries of partitions the manager did not open, written back unchanged
        self._unopened: tuple[dict[TopicPartition, int], dict[TopicPartition, int]] = ({}, {})

    def take_clean_shutdown(self) -> bool:
        """Whether the last shutdown was clean; the marker is removed, so a crash from now on
        counts as unclean."""
        marker = self.path / fn.CLEAN_SHUTDOWN_FILE
        self.had_clean_shutdown = marker.exists()
        if self.had_clean_shutdown:
            self._broker_epoch = _broker_epoch(marker)
        delete_if_exists(marker)
        return self.had_clean_shutdown

    def keep_unopened(
        self, recovery: Mapping[TopicPartition, int], starts: Mapping[TopicPartition, int]
    ) -> None:
        """A partial load: these partitions' checkpoint entries outlive every rewrite."""
        self._unopened = (dict(recovery), dict(starts))

    def mark_clean_shutdown(self) -> None:
        """Kafka's CleanShutdownFileHandler format, with the broker epoch the last clean
        shutdown left (-1 if none): a KRaft broker taking the directory back registers with
        it, and a marker saying -1 makes it treat every partition as uncleanly shut down
        (KIP-966)."""
        marker = self.path / fn.CLEAN_SHUTDOWN_FILE
        document = {"version": 0, "brokerEpoch": self._broker_epoch}
        write_atomically(marker, json.dumps(document, separators=(",", ":")).encode())

    def read_checkpoints(self) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(recovery points, log start offsets); an unreadable file counts as empty, as in Kafka
        (everything is then recovered)."""
        out = []
        for f in (self.recovery_points, self.log_start_offsets):
            try:
                out.append({tp: max(0, offset) for tp, offset in f.read().items()})
            except CorruptCheckpointError:
                out.append({})
        return out[0], out[1]

    def checkpoint_logs(self, logs: Sequence[tuple[TopicPartition, Log]]) -> None:
        """Both checkpoints of this directory's ``logs``."""
        self.checkpoint_recovery_points(logs)
        self.checkpoint_log_start_offsets(logs)

    def checkpoint_recovery_points(self, logs: Sequence[tuple[TopicPartition, Log]]) -> None:
        """Write the recovery points of this directory's ``logs``, then let each log drop the
        producer snapshots the checkpoint made unneeded (Kafka's checkpointLogRecoveryOffsets)."""
        self.recovery_points.write(
            {**self._unopened[0], **{tp: log.recovery_point for tp, log in logs}}
        )
        for _, log in logs:
            log.delete_snapshots_after_recovery_point_checkpoint()

    def checkpoint_log_start_offsets(self, logs: Sequence[tuple[TopicPartition, Log]]) -> None:
        """Write the log start offsets of this directory's ``logs``, each only above its first
        segment's base, or always for a remote-enabled log (whose log start offset is below
        its local segments), as Kafka keeps it (Kafka's checkpointLogStartOffsetsInDir)."""
        starts = {
            tp: log.log_start_offset
            for tp, log in logs
            if log.tiering.enabled or log.log_start_offset > log.segments.base_offsets[0]
        }
        self.log_start_offsets.write({**self._unopened[1], **starts})

    def partition_dirs(self) -> list[Path]:
        """The directories to load: all but a KRaft node's metadata log (in any form)."""
        return partition_dirs(self.path)

    def partitions(self) -> tuple[list[PartitionDir], list[PartitionDir]]:
        """(the partitions to open, those a deletion left marked ``-delete``): ``partitions``."""
        return partitions(self.path)

    def write_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        text = json.dumps({t: dict(c) for t, c in sorted(configs.items())}, indent=1)
        write_atomically(self.path / TOPIC_CONFIGS_FILE, text.encode())

    def write_dynamic_configs(
        self, brokers: Mapping[str, Mapping[str, str]], groups: Mapping[str, Mapping[str, str]]
    ) -> None:
        document = {
            "brokers": {level: dict(c) for level, c in sorted(brokers.items()) if c},
            "groups": {group: dict(c) for group, c in sorted(groups.items()) if c},
        }
        write_atomically(self.path / DYNAMIC_CONFIGS_FILE, json.dumps(document, indent=1).encode())

    def release(self) -> None:
        self._lock.release()


def partition_dirs(log_dir: Path) -> list[Path]:
    """The directories of ``log_dir`` to load: all but a KRaft node's metadata log."""
    return sorted(p for p in log_dir.iterdir() if p.is_dir() and not is_metadata_log(p))


def partitions(log_dir: Path) -> tuple[list[PartitionDir], list[PartitionDir]]:
    """(the partitions of ``log_dir`` to open, those a deletion left marked ``-delete``).
    Neither holds what is not a partition (remote-log-index-cache ...) nor a ``-future`` or
    ``-stray`` directory, which Kafka leaves for replica movement and for the operator."""
    live: list[PartitionDir] = []
    deleted: list[PartitionDir] = []
    for path in partition_dirs(log_dir):
        try:
            tp = fn.parse_partition_dir_name(path.name)
        except InvalidTopicError:
            continue
        if path.name.endswith(fn.DELETE_DIR_SUFFIX):
            deleted.append((tp, path))
        elif not path.name.endswith((fn.FUTURE_DIR_SUFFIX, fn.STRAY_DIR_SUFFIX)):
            live.append((tp, path))
    return live, deleted


def _broker_epoch(marker: Path) -> int:
    """The ``brokerEpoch`` of a clean-shutdown marker; -1 if it has none or is unreadable."""
    try:
        epoch = json.loads(marker.read_text("utf-8")).get("brokerEpoch", -1)
    except (OSError, ValueError, AttributeError):
        return -1
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else -1


def topic_configs(
    log_dirs: Sequence[Path], metadata_log_dir: str | Path | None = None
) -> dict[str, dict[str, str]]:
    """Every topic's config overrides (``stored_configs``)."""
    return stored_configs(log_dirs, metadata_log_dir).topics


def stored_configs(
    log_dirs: Sequence[Path], metadata_log_dir: str | Path | None = None, node: int | None = None
) -> KRaftConfigs:
    """Every topic's config overrides: those kafkalog's file in each log directory names, and
    for other topics those a KRaft node's metadata log holds (a Kafka broker keeps topic configs
    there); and the metadata log's dynamic broker configs, every broker's and then those of the
    node the directories' ``meta.properties`` names. The metadata log is read once, from
    ``metadata.log.dir`` if given, else from the first log directory that has one (Kafka puts
    it in the first of ``log.dirs``).

    Once a broker or group config was set at run time through kafkalog, its own file holds
    every dynamic config (seeded from the metadata log's) and the broker layers come from it:
    every broker's and node ``node``'s (the ``meta.properties`` node, else ``node``, else 1)."""
    configs: dict[str, dict[str, str]] = {}
    for d in log_dirs:
        configs.update(read_topic_configs(d))
    meta_node = node_id(log_dirs)
    this_node = own_node(log_dirs, node)
    kraft = KRaftConfigs({}, ({}, {}))
    homes = [Path(metadata_log_dir)] if metadata_log_dir else log_dirs
    for metadata_log in (home / f"{CLUSTER_METADATA_TOPIC}-0" for home in homes):
        if metadata_log.is_dir():
            kraft = kraft_configs(metadata_log, meta_node)
            for topic, overrides in kraft.topics.items():
                configs.setdefault(topic, overrides)
            break
    else:
        if metadata_log_dir:  # given, so expected: a typo would quietly put Kafka's defaults on
            logger.warning(
                "metadata.log.dir %s holds no %s-0", metadata_log_dir, CLUSTER_METADATA_TOPIC
            )
    own = next((found for d in log_dirs if (found := read_dynamic_configs(d)) is not None), None)
    if own is None:
        every, mine = kraft.broker_layers
        brokers: dict[str, dict[str, str]] = {"": dict(every), str(this_node): dict(mine)}
        groups: dict[str, dict[str, str]] = {}
    else:
        brokers, groups = own
    layers = (brokers.get("", {}), brokers.get(str(this_node), {}))
    return KRaftConfigs(configs, layers, kraft.acls, kraft.quotas, brokers, groups)


def own_node(log_dirs: Sequence[Path], node: int | None) -> int:
    """The node whose run-time broker configs apply: ``meta.properties``' id, else ``node``
    (serve's ``node.id``), else 1 (``node.id``'s default)."""
    found = node_id(log_dirs)
    return found if found is not None else (1 if node is None else node)


def read_dynamic_configs(
    log_dir: Path,
) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]] | None:
    """(broker level -> keys, group -> keys) kept in ``log_dir``; None if it has no such file;
    CorruptCheckpointError if it is not what kafkalog writes."""
    path = log_dir / DYNAMIC_CONFIGS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise CorruptCheckpointError(f"unreadable dynamic configs: {err}", file=str(path)) from err
    parts = [data.get(k) if isinstance(data, dict) else None for k in ("brokers", "groups")]
    found: list[dict[str, dict[str, str]]] = []
    for part in parts:
        if not isinstance(part, dict) or not all(isinstance(c, dict) for c in part.values()):
            raise CorruptCheckpointError(
                "dynamic configs must be a JSON object of brokers and groups, each name -> "
                "{key: value}",
                file=str(path),
            )
        found.append({str(n): {str(k): str(v) for k, v in c.items()} for n, c in part.items()})
    brokers, groups = found
    return brokers, groups


def read_topic_configs(log_dir: Path) -> dict[str, dict[str, str]]:
    """The topic config overrides kept in ``log_dir`` (no lock needed: the file is replaced
    atomically); CorruptCheckpointError if it is not what kafkalog writes."""
    path = log_dir / TOPIC_CONFIGS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise CorruptCheckpointError(f"unreadable topic configs: {err}", file=str(path)) from err
    if not isinstance(data, dict) or not all(isinstance(c, dict) for c in data.values()):
        raise CorruptCheckpointError(
            "topic configs must be a JSON object of topic -> {key: value} objects",
            file=str(path),
        )
    return {str(t): {str(k): str(v) for k, v in c.items()} for t, c in data.items()}


def is_metadata_log(path: Path) -> bool:
    """Whether ``path`` is a ``__cluster_metadata`` partition directory (live, or one of the
    ``-delete``/``-stray`` forms), which only Kafka's Raft layer may touch."""
    try:
        return fn.parse_partition_dir_name(path.name).topic == CLUSTER_METADATA_TOPIC
    except KafkaLogError:
        return False
