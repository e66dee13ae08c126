"""What the LogManager's parts (its run-time configs, its topic creation) share, declared once.

Why: LogManager is split by what each part owns, as mixins of one class; each part reads the
manager's lock, partition map, directories and topic configs, and mypy needs them declared.
Refuses: holding any state or behaviour of its own.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.log_dir import LogDirectory
from kafkalog.manager.offline_dirs import OfflineLogDirs
from kafkalog.types import TopicPartition


class ManagerPart:
    """The LogManager's state, as its parts see it."""

    _lock: threading.RLock
    _logs: dict[TopicPartition, tuple[Log, LogDirectory]]
    _unopened: dict[TopicPartition, LogDirectory]
    _offline: OfflineLogDirs
    _dirs: list[LogDirectory]
    _topic_configs: dict[str, dict[str, str]]
    default_config: LogConfig
    config: ManagerConfig

    if TYPE_CHECKING:  # LogManager's own

        def _check_open(self) -> None: ...

        def _write_topic_configs(self) -> None: ...
