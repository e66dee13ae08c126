"""``make bench-serve`` replaces its suite's rows in BENCHMARKS.md and keeps every other row as
the file has it, whatever this machine's ignored results file holds (a fresh clone has none:
the merge once wrote a table of the serve rows alone)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.__main__ import merged_markdown

HEAD = """# Benchmarks

- Date: 2026-01-02 10:00 UTC for serve; the other rows from the full run of 2026-01-01 09:00 UTC
- Machine: m

| suite | operation | kafkalog | baseline | baseline figure | ratio | target | status | notes |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
"""


def _table(*rows: str) -> str:
    return HEAD + "".join(f"| {r} | x | 1 | b | 1 | 1.00 | report | report | |\n" for r in rows)


def test_only_the_run_suites_rows_are_replaced_in_suite_order() -> None:
    previous = _table("codec", "storage", "spark", "serve", "serve")
    fresh = _table("serve").replace("| x |", "| new |")
    merged = merged_markdown(previous, fresh, ["serve"], "2026-02-03 04:05 UTC")
    rows = [line for line in merged.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["codec", "storage", "spark", "serve"]
    assert rows[-1].split("|")[2].strip() == "new"
    assert (
        "- Date: 2026-02-03 04:05 UTC for serve; the other rows from the full run of "
        "2026-01-01 09:00 UTC"
    ) in merged


def test_a_suite_new_to_the_file_takes_its_place_in_the_order() -> None:
    merged = merged_markdown(_table("codec", "serve"), _table("spark"), ["spark"], "now")
    suites = [line.split("|")[1].strip() for line in merged.splitlines() if line.startswith("| ")]
    assert suites[2:] == ["codec", "spark", "serve"]
    # the serve rows merged before keep their date
    assert (
        "- Date: now for spark; 2026-01-02 10:00 UTC for serve; the other rows from the full "
        "run of 2026-01-01 09:00 UTC"
    ) in merged
