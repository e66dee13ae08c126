"""``kafkalog dump-log`` streams: it holds a chunk of the segment (or one larger batch), not the
file, and prints each line as it is made. The memory bound is checked on a real process's peak
RSS; how fast the first line comes on a 1 GiB segment is a ``make bench`` row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, Record

pytestmark = pytest.mark.one_codec  # the dump's own memory, not a codec's

SEGMENT_MIB = 192
RSS_BOUND_MIB = 130  # the interpreter and its imports take ~75 MiB of it


def peak_rss_mib(*args: str) -> int:
    """The peak RSS of ``python -m kafkalog *args``, measured by a parent of its own (the test
    process's other children must not count)."""
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'kafkalog', *sys.argv[1:]],"
        " stdout=subprocess.DEVNULL, check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                         check=True, timeout=300)  # fmt: skip
    return int(out.stdout)


def test_a_large_segment_dumps_in_bounded_memory(tmp_path: Path) -> None:
    value = os.urandom(512 * 1024)  # incompressible, so the file is as large as the records
    with Log.open(tmp_path / "t-0", LogConfig.from_properties({})) as log:
        for i in range(SEGMENT_MIB * 2):
            log.append([Record(value, b"k%d" % i, timestamp=1_700_000_000_000)])
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    assert segment.stat().st_size > SEGMENT_MIB << 20
    for options in ((), ("--deep-iteration",), ("--print-data-log",)):
        assert peak_rss_mib("dump-log", "--files", str(segment), *options) < RSS_BOUND_MIB, options


HEAVY_MODULES = ("pyarrow", "asyncio", "javaproperties", "rich", "kafkalog.cli.perf")


def test_a_dump_imports_none_of_the_other_commands_libraries(tmp_path: Path) -> None:
    """The first line of a dump waits on the interpreter's imports: the other subcommands'
    libraries (Arrow for perf, asyncio for serve, rich for verify) load only when they run."""
    with Log.open(tmp_path / "t-0", LogConfig.from_properties({})) as log:
        log.append([Record(b"v", b"k", timestamp=1_700_000_000_000)])
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    probe = (
        "import sys\n"
        "from kafkalog.cli.main import main\n"
        "sys.argv = ['kafkalog', 'dump-log', '--deep-iteration', '--files', sys.argv[1]]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit_:\n"
        "    assert not exit_.code, exit_.code\n"
        f"print(*[m for m in {HEAVY_MODULES!r} if m in sys.modules], file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(segment)], capture_output=True,
                         text=True, check=True, timeout=120)  # fmt: skip
    assert "baseOffset: 0" in out.stdout
    assert out.stderr.split() == []
