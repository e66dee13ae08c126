"""Timing and reporting shared by every benchmark suite.

Every figure is a median over rounds, after warm-up (this VM's first touch of memory is slow).
Ratios compare two figures measured in the same process, minutes apart.
"""

from __future__ import annotations

import gc
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Row:
    suite: str
    operation: str
    unit: str
    ours: float
    baseline_name: str
    baseline: float
    target: float | None = None  # minimum ours/baseline ratio, None = report only
    ceiling: float | None = None  # or: the most ``ours`` may be (memory, latency), in its unit
    notes: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    paired_ratio: float | None = None  # median of per-round ratios, when rounds were interleaved

    @property
    def ratio(self) -> float:
        if self.paired_ratio is not None:
            return self.paired_ratio
        return self.ours / self.baseline if self.baseline else float("nan")

    @property
    def status(self) -> str:
        if self.ceiling is not None:
            return "PASS" if self.ours <= self.ceiling else "FAIL"
        if self.target is None:
            return "report"
        return "PASS" if self.ratio >= self.target else "FAIL"

    @property
    def target_text(self) -> str:
        if self.ceiling is not None:
            return f"<= {fmt(self.ceiling, self.unit)}"
        return "report" if self.target is None else f">= {self.target:g}"


def _calls_for(fn: Callable[[], object], min_time: float) -> int:
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_time / 4:
            return calls
        calls *= 2


def interleaved(
    fns: list[Callable[[], object]],
    units_per_call: float,
    *,
    rounds: int = 9,
    min_time: float = 0.15,
    gc_on: bool = False,
) -> tuple[list[float], list[float]]:
    """Time the candidates round by round (A, B, C, A, B, C, ...), so drift in machine speed
    hits all alike; with the GC off, as timeit does, unless ``gc_on`` (work that allocates an
    object per record, whose collector cost applications pay). Returns each candidate's median
    units/s and, for each, the median of its per-round ratio to the *second* one (the baseline)."""
    for fn in fns:
        fn()  # warm-up
    calls = [_calls_for(fn, min_time) for fn in fns]
    per_round: list[list[float]] = [[] for _ in fns]
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(rounds):
            for i, fn in enumerate(fns):
                gc.collect()
                if not gc_on:
                    gc.disable()
                start = time.perf_counter()
                n = 0
                while True:
                    for _ in range(calls[i]):
                        fn()
                    n += calls[i]
                    elapsed = time.perf_counter() - start
                    if elapsed >= min_time:
                        break
                gc.enable()
                per_round[i].append(n * units_per_call / elapsed)
    finally:
        if gc_was_enabled:
            gc.enable()
    medians = [statistics.median(r) for r in per_round]
    base = per_round[1]
    ratios = [statistics.median(a / b for a, b in zip(r, base, strict=True)) for r in per_round]
    return medians, ratios


def machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB"
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, Python {platform.python_version()}"


def fmt(value: float, unit: str) -> str:
    if unit == "MB/s" and value >= 1e3:  # a unit with a prefix of its own takes no second one
        return f"{value / 1e3:.2f} GB/s"
    if unit.endswith("/s") and value >= 1e6:
        return f"{value / 1e6:.2f} M{unit}"
    if unit.endswith("/s") and value >= 1e3:
        return f"{value / 1e3:.1f} k{unit}"
    return f"{value:.3g} {unit}"


def in_temp_dir(prefix: str, body: Callable[[Path], list[Row]]) -> list[Row]:
    """Run a suite's body in a fresh temporary directory, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return body(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
