"""Child process for test_crash_kill: appends forever, printing each acknowledged append.

Every value is a pure function of its offset, so the parent can check bytes after a SIGKILL.
``plain`` mode prints each acknowledged last offset; ``txn`` mode runs transactions of one
producer between plain writes and prints ``data <last offset>`` or ``commit|abort <offset>``.
"""

from __future__ import annotations

import random
import sys

from kafkalog import Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields

CONFIG = {"internal.segment.bytes": 20_000, "index.interval.bytes": 500, "flush.messages": 1}
CODECS = ["none", "gzip", "lz4", "zstd", "snappy"]
PRODUCER_ID = 77


def value_for(offset: int) -> bytes:
    return (b"offset-%d;" % offset) * (1 + offset % 9)


def records_at(first: int, n: int) -> list[Record]:
    return [Record(value_for(o), key=b"%d" % o) for o in range(first, first + n)]


def run_plain(log: Log, rng: random.Random) -> None:
    while True:
        info = log.append(
            records_at(log.log_end_offset, rng.randint(1, 6)), compression=rng.choice(CODECS)
        )
        print(info.last_offset, flush=True)


def run_transactions(log: Log, rng: random.Random) -> None:
    # as a restarted producer's InitProducerId: bump the epoch, abort what was left open
    entry = log.producer_entry(PRODUCER_ID)
    epoch = 0 if entry is None else entry.producer_epoch + 1
    if entry is not None and entry.current_txn_first_offset is not None:
        print(
            "abort", log.append_end_txn_marker(PRODUCER_ID, epoch, "abort").first_offset, flush=True
        )
    seq = 0
    while True:
        for _ in range(rng.randint(1, 3)):
            n = rng.randint(1, 4)
            producer = ProducerFields(PRODUCER_ID, epoch, seq, is_transactional=True)
            info = log.append(
                records_at(log.log_end_offset, n), producer=producer, compression=rng.choice(CODECS)
            )
            seq += n
            print("data", info.last_offset, flush=True)
            if rng.random() < 0.3:
                info = log.append(records_at(log.log_end_offset, 1))
                print("data", info.last_offset, flush=True)
        kind = rng.choice(["commit", "abort"])
        print(kind, log.append_end_txn_marker(PRODUCER_ID, epoch, kind).first_offset, flush=True)


def main() -> None:
    directory, seed, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    log = Log.open(directory, LogConfig.from_properties(CONFIG))
    print("ready", log.log_end_offset, flush=True)
    if mode == "txn":
        run_transactions(log, rng)
    else:
        run_plain(log, rng)


if __name__ == "__main__":
    main()
