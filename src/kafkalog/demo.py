"""``make demo``: the most end-to-end path that exists, run on embedded defaults.

Why: a fresh clone should show what kafkalog does in one command. Until the Spark pipeline lands
this runs the record and storage layers end to end: it writes a clickstream as Kafka record
batches (every codec, plus a transaction marker) and scans them back with the one scanner, then
appends the same events to a partition log in ``demo-data/clicks-0`` (several segments),
simulates a crash with a torn write, reopens, and reads everything back. Refuses: anything a
user would need to configure.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kafkalog import CompressionType, MemoryRecords, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.records import BatchScanner, build_end_txn_marker
from kafkalog.types import ControlRecordType

START_MS = 1_700_000_000_000


def clickstream(n: int, seed: int = 7) -> list[Record]:
    rng = random.Random(seed)
    pages = ["/", "/search", "/item", "/cart", "/checkout"]
    out = []
    for i in range(n):
        user = f"user-{rng.randrange(500):04d}".encode()
        event = {"user": user.decode(), "page": rng.choice(pages), "ms": rng.randrange(20, 900)}
        out.append(
            Record(
                json.dumps(event).encode(),
                key=user,
                headers=[("source", b"web"), ("seq", str(i).encode())],
                timestamp=START_MS + i * 37,
            )
        )
    return out


def main(out_dir: str = "demo-data") -> int:
    console = Console()
    logging.getLogger("kafkalog").setLevel(logging.ERROR)  # the demo prints the loader's report
    path = Path(out_dir)
    path.mkdir(exist_ok=True)
    segment = path / "clickstream-0.batches"
    events = clickstream(10_000)
    parts, offset, rows = [], 0, []
    for codec in CompressionType:
        chunk = events[offset : offset + 2000]
        data = bytes(MemoryRecords.build(chunk, compression=codec, base_offset=offset))
        parts.append(data)
        rows.append((codec.kafka_name, len(chunk), offset, len(data)))
        offset += len(chunk)
    parts.append(
        build_end_txn_marker(
            offset=offset,
            producer_id=1,
            producer_epoch=0,
            marker=ControlRecordType.COMMIT,
            coordinator_epoch=0,
            timestamp=START_MS,
        )
    )
    segment.write_bytes(b"".join(parts))

    data = segment.read_bytes()
    scanner = BatchScanner(data, deep=True)
    batches = list(scanner)
    records = sum(len(b.records()) for b in batches if not b.is_control)
    table = Table(title=f"wrote {segment} ({len(data):,} bytes)")
    for col in ("codec", "records", "base offset", "batch bytes"):
        table.add_column(col, justify="right")
    for name, n, base, size in rows:
        table.add_row(name, f"{n:,}", f"{base:,}", f"{size:,}")
    console.print(table)
    console.print(
        f"scanned back: {len(batches)} batches, {records:,} records, stop={scanner.stop.value}, "  # type: ignore[union-attr]
        f"valid bytes {scanner.valid_bytes:,} of {len(data):,}"
    )
    damaged = bytearray(data)
    damaged[len(parts[0]) + 100] ^= 0x01
    check = BatchScanner(damaged)
    kept = list(check)
    console.print(
        f"flipped one bit in batch 2: the scanner kept {len(kept)} batch(es) "
        f"and stopped: {check.error}"
    )
    ok = records == len(events) and scanner.stop is not None and not scanner.stop.is_corruption
    ok = partition_log_demo(console, path, events) and ok
    console.print("[green]demo OK[/green]" if ok else "[red]demo FAILED[/red]")
    return 0 if ok else 1


def partition_log_demo(console: Console, path: Path, events: list[Record]) -> bool:
    """Append to a partition log, crash with a torn write, recover, read everything back."""
    directory = path / "clicks-0"
    if directory.exists():
        for f in directory.iterdir():
            f.unlink()
    config = LogConfig.from_properties({"segment.bytes": 262144, "compression.type": "lz4"})
    log = Log.open(directory, config)
    for start in range(0, len(events), 500):
        log.append(events[start : start + 500])
    end = log.log_end_offset
    console.print(
        f"appended {end:,} events to {directory}: {log.number_of_segments} segments, "
        f"{log.size_in_bytes:,} bytes (lz4)"
    )
    log.close_without_flush()  # a crash: no flush, no clean-shutdown marker
    active = sorted(directory.glob("*.log"))[-1]
    with open(active, "ab") as torn:
        torn.write(b"\x00\x00\x00\x00\x00\x00\x27\x10\x00\x00\x40\x00torn")  # a half-written batch
    log = Log.open(directory, config)
    for action in log.load_result.actions:
        console.print(f"  recovery: {action}")
    read, offset = 0, 0
    while offset < log.log_end_offset:
        recs = log.read_records(offset, 1 << 20)
        read += len(recs)
        offset = recs[-1].offset + 1
    console.print(
        f"after recovery: log end offset {log.log_end_offset:,}, read back {read:,} events"
    )
    log.close()
    return read == end == len(events)


if __name__ == "__main__":
    sys.exit(main())
