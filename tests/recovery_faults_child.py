"""Child process for test_recovery_faults: a LogManager appends plain and transactional batches
with ``flush.messages=1`` and prints ``<partition> <last offset>`` for each acknowledged append,
until the parent kills it. Values are a pure function of (partition, offset), so the parent can
check every acknowledged record byte for byte after recovery."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from kafkalog import LogManager, Record
from kafkalog.log.producer_batches import ProducerFields

TOPIC_CONFIG = {
    "flush.messages": "1",
    "internal.segment.bytes": "6000",
    "index.interval.bytes": "300",
}
PRODUCER_ID = 4242


def value_for(partition: int, offset: int) -> bytes:
    return b"p%d-o%d;" % (partition, offset) * (1 + offset % 5)


def main(directory: Path, limit: int) -> None:
    with LogManager(directory) as manager:
        logs = manager.create_topic("t", 2, TOPIC_CONFIG)
        print("ready", flush=True)
        seq, epoch, n = 0, 0, 0
        while n < limit:
            n += 1
            for p, log in enumerate(logs):
                first = log.log_end_offset
                if p == 1 and n % 3 == 0:  # a transaction of two batches, then its marker
                    producer = ProducerFields(PRODUCER_ID, epoch, seq, is_transactional=True)
                    log.append([Record(value_for(p, first), key=b"k")], producer=producer)
                    seq += 1
                    kind = "abort" if n % 2 else "commit"
                    info = log.append_end_txn_marker(PRODUCER_ID, epoch, kind)
                    print(p, info.last_offset, kind, first, flush=True)
                    continue
                records = [Record(value_for(p, first + i), key=b"%d" % i) for i in range(3)]
                info = log.append(records, compression="lz4" if n % 2 else "none")
                print(p, info.last_offset, flush=True)
        print("done", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # a crash, not a clean close


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
