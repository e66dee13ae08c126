"""A progress bar for long commands, drawn only when stderr is a terminal.

Why: a bar helps a person watching a long verify or perf run, but in a pipe or a script it is
noise that breaks parsers. Refuses: writing to stdout (that is the command's output) and drawing
anything when stderr is not a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

Advance = Callable[[int], None]


def _no_op(_: int) -> None:
    pass


@contextmanager
def progress(description: str, total: int, *, console: Console | None = None) -> Iterator[Advance]:
    """Yield ``advance(n)``; a bar on stderr if it is a terminal (or ``console`` is given)."""
    if console is None:
        if not sys.stderr.isatty():
            yield _no_op
            return
        console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int) -> None:
            bar.advance(task, n)

        yield advance
