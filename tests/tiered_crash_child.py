"""Child process for test_tiered_crash: fills a remote-enabled topic, then runs passes of the
remote log manager and kills itself with SIGKILL at step ``crash_at`` of them (a metadata
event, a store call, an object of a copy, a local deletion), as a kill -9 would stop it there.

Usage: tiered_crash_child.py <log dir> <store uri> <crash at> <records>. Prints ``filled <n>``
once every record is appended and flushed (acknowledged), then ``steps <n>`` if it lived.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from kafkalog import Record
from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_manager import RemoteLogManager
from kafkalog.tiered.remote_store import RemoteLogStore

TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "5000",
    "index.interval.bytes": "600",
    "local.retention.bytes": "1",
    "retention.bytes": "-1",
    "retention.ms": "-1",
}


def value_for(offset: int) -> bytes:
    return (b"offset-%d;" % offset) * (1 + offset % 7)


class _Steps:
    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.count = 0

    def step(self) -> None:
        self.count += 1
        if self.count == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    log_dir, uri, crash_at, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    steps = _Steps(crash_at)
    config = ManagerConfig.from_properties({"remote.log.storage.system.enable": "true"})
    manager = LogManager(log_dir, config=config)
    if "orders" not in manager.topics():
        manager.create_topic("orders", 1, TOPIC_CONFIG)
    log = manager.get_log("orders", 0)
    while log.log_end_offset < records:
        offset = log.log_end_offset
        log.append([Record(value_for(offset), b"%d" % offset)])
    log.roll()
    log.flush()
    print("filled", log.log_end_offset, flush=True)
    store = RemoteLogStore.from_uri(uri)
    for name in ("copy_log_segment_data", "delete_log_segment_data"):
        real = getattr(store, name)

        def wrapped(*args: Any, _real: Any = real) -> Any:
            steps.step()
            result = _real(*args)
            steps.step()
            return result

        setattr(store, name, wrapped)
    real_open = store.filesystem.open_output_stream
    filesystem = store.filesystem

    class _Counting:
        def __getattr__(self, attr: str) -> Any:
            return getattr(filesystem, attr)

        def open_output_stream(self, path: str, *args: Any) -> Any:
            steps.step()  # between two objects of one copy
            return real_open(path, *args)

    store.filesystem = _Counting()  # type: ignore[assignment]
    rlm = RemoteLogManager(manager, store)
    real_publish = rlm._publish

    def publish(*args: Any) -> None:
        steps.step()
        real_publish(*args)
        steps.step()

    rlm._publish = publish  # type: ignore[method-assign]
    real_delete = log.delete_old_segments

    def delete_old_segments() -> int:
        steps.step()
        return real_delete()

    log.delete_old_segments = delete_old_segments  # type: ignore[method-assign]
    real_checkpoint = manager.run_log_start_offset_checkpoint

    def checkpoint() -> None:
        steps.step()  # the log start offset moved, not yet checkpointed
        real_checkpoint()

    manager.run_log_start_offset_checkpoint = checkpoint  # type: ignore[method-assign]
    rlm.run_once()
    # total retention: the older half of the remote segments goes
    tier = rlm.tier("orders", 0)
    assert tier is not None
    total = sum(m.segment_size_in_bytes for m in tier.segments()) + log.size_in_bytes
    manager.alter_topic_config("orders", {**TOPIC_CONFIG, "retention.bytes": str(total // 2)})
    rlm.run_once()
    print("steps", steps.count, flush=True)
    manager.close()


if __name__ == "__main__":
    main()
