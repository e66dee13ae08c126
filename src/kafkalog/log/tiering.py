"""What a Log knows of its remote tier (KIP-405; the remote parts of Kafka's UnifiedLog): whether
remote storage is on for it, the tier the remote log manager attached, and the highest offset a
finished copy holds.

Why: reads below the local segments and local retention both ask these questions, and the
answers change under the remote log manager while appends go on; one small object with one
lock answers them for the Log's reader and retention pass. Refuses: reading or copying
anything (the tier reads; the manager copies).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafkalog.errors import InvalidArgumentError
from kafkalog.log.config import LogConfig
from kafkalog.types import INT64_MAX, check_int

if TYPE_CHECKING:  # the tier's module loads pyarrow's filesystems: only a tiered log needs it
    from kafkalog.tiered.remote_tier import RemoteTier


class Tiering:
    """One log's remote side. Thread-safe."""

    def __init__(
        self,
        name: str,
        system_enable: bool,
        config: Callable[[], LogConfig],
        epochs: Callable[[], list[tuple[int, int]]],
    ) -> None:
        self._name = name
        self._system_enable = system_enable
        self._config = config
        self._epochs = epochs
        self._lock = threading.Lock()
        self._tier: RemoteTier | None = None
        self._highest = -1

    @property
    def enabled(self) -> bool:
        """Kafka's UnifiedLog.remoteLogEnabled: the broker's switch and the topic's config,
        read live (``kafka-configs --alter`` turns it on)."""
        return self._system_enable and self._config().remote_storage_enable

    @property
    def tier(self) -> RemoteTier | None:
        return self._tier

    @property
    def highest_offset(self) -> int:
        """The last offset remote storage holds of the log: -1 before any copy, and before a
        tier is attached (then nothing local may be deleted for it)."""
        return self._highest

    def attach(self, tier: RemoteTier) -> None:
        """The remote log manager hands the tier over once it has read the partition's
        metadata; the highest copied offset comes from it."""
        if not self.enabled:
            raise InvalidArgumentError(f"{self._name}: remote storage is not enabled")
        with self._lock:
            self._tier = tier
            self._highest = max(self._highest, tier.highest_offset(self._epochs()))

    def update_highest_offset(self, offset: int) -> None:
        """A copy up to ``offset`` finished (Kafka's updateHighestOffsetInRemoteStorage)."""
        check_int("offset", offset, -1, INT64_MAX)
        with self._lock:
            self._highest = max(self._highest, offset)

    def state(self) -> tuple[RemoteTier | None, int] | None:
        """(tier, highest copied offset) when remote storage is on, for the reader."""
        return (self._tier, self._highest) if self.enabled else None

    def copied_offset_bounding_retention(self) -> int | None:
        """With copies on, local retention keeps ``local.retention.*`` and what is not copied
        (Kafka's remoteLogEnabledAndRemoteCopyEnabled): the highest copied offset; else None."""
        if not self.enabled or self._config().remote_log_copy_disable:
            return None
        return self._highest

    def snapshots_kept_from(self, recovery_needs: int) -> int:
        """The lowest producer snapshot to keep: what recovery needs, and every one a copy of a
        segment not yet in remote storage will take."""
        copied = self.copied_offset_bounding_retention()
        return recovery_needs if copied is None else min(recovery_needs, copied + 1)
