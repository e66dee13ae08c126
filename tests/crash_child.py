"""Child process for test_crash_kill: appends forever, printing each acknowledged last offset.

Every value is a pure function of its offset, so the parent can check bytes after a SIGKILL.
"""

from __future__ import annotations

import random
import sys

from kafkalog import Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log

CONFIG = {"segment.bytes": 20_000, "index.interval.bytes": 500, "flush.messages": 1}
CODECS = ["none", "gzip", "lz4", "zstd", "snappy"]


def value_for(offset: int) -> bytes:
    return (b"offset-%d;" % offset) * (1 + offset % 9)


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = Log.open(directory, LogConfig.from_properties(CONFIG))
    print("ready", log.log_end_offset, flush=True)
    while True:
        first = log.log_end_offset
        n = rng.randint(1, 6)
        records = [Record(value_for(o), key=b"%d" % o) for o in range(first, first + n)]
        info = log.append(records, compression=rng.choice(CODECS))
        print(info.last_offset, flush=True)


if __name__ == "__main__":
    main()
