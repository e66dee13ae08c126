"""``python -m bench dump``: ``kafkalog dump-log`` on a 1 GiB segment against Kafka's own
DumpLogSegments on the same file with the same options.

Why: a dump of a large segment must stream: bounded memory and a first line at
once, whatever the segment's size. Each tool runs as its own process; the peak RSS is that
process's (``wait4``), and the first line is timed from the start of the process to its first
stdout line. Both are absolute targets (at most 100 MB, within a second), so the rows carry a
ceiling; Kafka's figures are printed beside them for scale. Our package's bytecode is compiled
before the clock starts, as an installed package's is. Refuses: timing Kafka's tool where
Java or Maven is missing (the row then says so and is not written as a pass).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import kafkalog
from bench.harness import Row, in_temp_dir

ROOT = Path(__file__).resolve().parent.parent
SEGMENT_BYTES = 1 << 30
VALUE_BYTES = 1024
OPTIONS = ("--deep-iteration",)


def _write_segment(root: Path) -> Path:
    """A 1 GiB segment of 1 KiB random values in ~1 MiB batches, through the library."""
    from kafkalog import Log, LogConfig, MemoryRecords

    directory = root / "big-0"
    config = LogConfig.from_properties({"segment.bytes": str(SEGMENT_BYTES + (64 << 20))})
    per_batch = 1000
    value = pa.array([os.urandom(VALUE_BYTES) for _ in range(per_batch)], pa.binary())
    table = pa.table({"value": value, "timestamp": pa.repeat(1_700_000_000_000, per_batch)})
    with Log.open(directory, config) as log:
        while (directory / "00000000000000000000.log").stat().st_size < SEGMENT_BYTES:
            log.append_records(MemoryRecords.from_arrow(table, batch_size=1 << 30))
    return directory / "00000000000000000000.log"


# Runs the command and prints its first-line and total seconds and its peak RSS. It is a small
# process of its own: a child's ru_maxrss counts the pages it shared with its parent at fork, so
# forking from this (large) benchmark process would inflate every figure alike.
_PROBE = """
import os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
first = proc.stdout.readline()
first_line = time.perf_counter() - start
while proc.stdout.read(1 << 20):
    pass
_, status, usage = os.wait4(proc.pid, 0)
if os.waitstatus_to_exitcode(status) != 0 or not first:
    sys.exit(f"{sys.argv[1:4]} exited {os.waitstatus_to_exitcode(status)}")
print(first_line, time.perf_counter() - start, usage.ru_maxrss * 1024 / 1e6)
"""


def _run_and_watch(cmd: list[str]) -> tuple[float, float, float]:
    """(seconds to the first stdout line, seconds in all, peak RSS in MB) of ``cmd``."""
    out = subprocess.run([sys.executable, "-c", _PROBE, *cmd], capture_output=True, text=True,
                         check=True, timeout=1800).stdout.split()  # fmt: skip
    first_line, total, rss = (float(x) for x in out)
    return first_line, total, rss


def _kafka_command(segment: Path) -> list[str] | None:
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, TOOL_LOG, classpath

        version = KAFKA_VERSIONS[-1]
        return ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(version),
                "org.apache.kafka.tools.DumpLogSegments", "--files", str(segment), *OPTIONS]  # fmt: skip
    except BaseException as err:  # pytest.skip, which classpath() raises, is a BaseException
        print(f"dump: Kafka's DumpLogSegments unavailable: {err}", file=sys.stderr)
        return None


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-dump-", _run)


def _run(root: Path) -> list[Row]:
    segment = _write_segment(root)
    # Bytecode compiled first, as `pip install` does and as Kafka's jars come: an editable
    # install under PYTHONDONTWRITEBYTECODE would otherwise compile every module it imports
    # before the first line, each time.
    package = Path(kafkalog.__file__).parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    size_mb = segment.stat().st_size / 1e6
    ours = _run_and_watch([sys.executable, "-m", "kafkalog", "dump-log", "--files",
                           str(segment), *OPTIONS])  # fmt: skip
    kafka_cmd = _kafka_command(segment)
    theirs = _run_and_watch(kafka_cmd) if kafka_cmd else (float("nan"),) * 3
    what = f"dump-log {' '.join(OPTIONS)}, {size_mb:.0f} MB segment of 1 KiB records"
    note = (
        f"same file and options; whole dump {ours[1]:.1f} s (Kafka {theirs[1]:.1f} s); "
        "lower is better, ratio is ours / Kafka's"
    )
    return [
        Row("dump", f"{what}: peak RSS", "MB", ours[2], "Kafka 4.3.1 DumpLogSegments",
            theirs[2], ceiling=100, notes=note),
        Row("dump", f"{what}: first line", "s", ours[0], "Kafka 4.3.1 DumpLogSegments",
            theirs[0], ceiling=1.0, notes=note),
    ]  # fmt: skip
