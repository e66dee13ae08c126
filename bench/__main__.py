"""``python -m bench``: run every suite, print the table, and rewrite BENCHMARKS.md."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

from bench import cleaner, codec, dump, manager, scale, serve, spark, storage, tiered
from bench.harness import Row, fmt, machine

SUITES = {
    "codec": codec.run,
    "storage": storage.run,
    "manager": manager.run,
    "cleaner": cleaner.run,
    "dump": dump.run,
    "spark": spark.run,
    "serve": serve.run,
    "scale": scale.run,
    "tiered": tiered.run,
}
ROOT = Path(__file__).resolve().parent.parent


def render_markdown(rows: list[Row], when: str, host: str) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Produced by `make bench` (`python -m bench`), which rewrites this file; do not edit by hand.",
        "Each row measures kafkalog and its baseline in the same run; the ratio is ours / baseline.",
        "Candidates run in interleaved rounds after warm-up; a ratio is the median of per-round",
        "ratios where rounds were paired. Rows that make an object per record (the codec suite)",
        "run with the GC on, as applications do; the rest with it off while timed, as timeit",
        "does. Each row names what it compares and on what records. The machine is a noisy VM:",
        "compare ratios, not absolute figures across runs.",
        "",
        f"- Date: {when}",
        f"- Machine: {host}",
        "",
        "| suite | operation | kafkalog | baseline | baseline figure | ratio | target | status | also measured, notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        extra = "; ".join(
            [f"{k}: {fmt(v, r.unit)} (ours/it {r.ours / v:.2f})" for k, v in r.extra.items()]
            + ([r.notes] if r.notes else [])
        )
        target = r.target_text
        lines.append(
            f"| {r.suite} | {r.operation} | {fmt(r.ours, r.unit)} | {r.baseline_name} | "
            f"{fmt(r.baseline, r.unit)} | {r.ratio:.2f} | {target} | {r.status} | {extra} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("suites", nargs="*", choices=[*SUITES, []], help="default: all")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite BENCHMARKS.md")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="replace only these suites' rows in BENCHMARKS.md, keeping the last full run's",
    )
    args = parser.parse_args()
    rows: list[Row] = []
    for name in args.suites or SUITES:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.extend(SUITES[name]())
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    host = machine()
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"kafkalog benchmarks — {when} — {host}")
        for col in ("operation", "kafkalog", "baseline", "figure", "ratio", "target", "status"):
            table.add_column(col)
        for r in rows:
            table.add_row(
                r.operation,
                fmt(r.ours, r.unit),
                r.baseline_name,
                fmt(r.baseline, r.unit),
                f"{r.ratio:.2f}",
                r.target_text,
                r.status,
            )
        Console(width=200).print(table)
    except ImportError:
        for r in rows:
            print(
                f"{r.operation}: {fmt(r.ours, r.unit)} vs {r.baseline_name} "
                f"{fmt(r.baseline, r.unit)} ratio {r.ratio:.2f} {r.status}"
            )
    if not args.no_write:
        text = render_markdown(rows, when, host)
        if args.merge and args.suites:
            text = merged_markdown((ROOT / "BENCHMARKS.md").read_text(), text, args.suites, when)
        (ROOT / "BENCHMARKS.md").write_text(text)
        results = ROOT / "bench" / "results"
        results.mkdir(exist_ok=True)
        (results / "latest.json").write_text(  # this run's rows only
            json.dumps(
                [r.__dict__ | {"ratio": r.ratio, "status": r.status} for r in rows], indent=1
            )
        )
    failed = [r for r in rows if r.status == "FAIL"]
    for r in failed:
        print(
            f"FAIL: {r.operation}: {fmt(r.ours, r.unit)}, ratio {r.ratio:.2f}, target "
            f"{r.target_text}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _row_suite(line: str) -> str | None:
    """The suite of a table row of BENCHMARKS.md; None for any other line."""
    if not line.startswith("| ") or line.startswith(("| suite |", "| --- |")):
        return None
    return line.split("|")[1].strip()


def merged_markdown(previous: str, fresh: str, suites: list[str], when: str) -> str:
    """``previous`` (BENCHMARKS.md as committed) with the rows of ``suites`` replaced by those
    of ``fresh`` (this run's rendering), in suite order, and a date line that says which rows
    are from when. The other rows are kept as they are written: the file is their record."""
    order = list(SUITES)
    kept = [line for line in previous.splitlines() if _row_suite(line) not in (None, *suites)]
    new = [line for line in fresh.splitlines() if _row_suite(line) in suites]
    table = sorted([*kept, *new], key=lambda line: order.index(_row_suite(line) or ""))
    head = [line for line in fresh.splitlines() if not line.startswith("| ") or
            line.startswith(("| suite |", "| --- |"))]  # fmt: skip
    before = re.search(r"^- Date: (.*)$", previous, re.M)
    earlier = before.group(1) if before else "an earlier run"
    # a merge of a merge: the other rows are still the full run's, named after the last "of",
    # and each suite merged since keeps its own date unless this run replaced it
    parts = earlier.split("; ")
    earlier = parts[-1].rsplit("the other rows from the full run of ", 1)[-1]
    kept_dates = [
        part for part in parts[:-1]
        if " for " in part and not set(part.split(" for ", 1)[1].split(", ")) & set(suites)
    ]  # fmt: skip
    stamp = "; ".join([f"{when} for {', '.join(suites)}", *kept_dates,
                       f"the other rows from the full run of {earlier}"])  # fmt: skip
    head = [f"- Date: {stamp}" if line.startswith("- Date: ") else line for line in head]
    return "\n".join([*head, *table]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
