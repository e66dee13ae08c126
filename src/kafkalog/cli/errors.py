"""How the ``kafkalog`` command reports a user's mistake: one line on stderr, a distinct exit code.

Why: every subcommand, in whichever module it lives, must turn a kafkalog error into the same
kind of line and code, never a traceback. Refuses: catching anything a user cannot cause.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from kafkalog.errors import (
    CorruptionError,
    KafkaLogError,
    LogDirectoryLockedError,
    UnknownTopicOrPartitionError,
)

# distinct exit codes, so scripts can tell what went wrong (2 is click's usage error)
EXIT_PROBLEMS_FOUND = 1
EXIT_NOT_FOUND = 3
EXIT_CORRUPT = 4
EXIT_INVALID = 5
EXIT_LOCKED = 6

F = TypeVar("F", bound=Callable[..., Any])


def _exit_code(err: KafkaLogError) -> int:
    if isinstance(err, UnknownTopicOrPartitionError):
        return EXIT_NOT_FOUND
    if isinstance(err, CorruptionError):
        return EXIT_CORRUPT
    if isinstance(err, LogDirectoryLockedError):
        return EXIT_LOCKED
    return EXIT_INVALID  # bad names, offsets, configs, existing topics


def user_errors(fn: F) -> F:
    """One line and an exit code for every error a user can cause."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaLogError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(_exit_code(err))
        except FileNotFoundError as err:
            click.echo(f"error: no such file or directory: {err.filename}", err=True)
            sys.exit(EXIT_NOT_FOUND)
        except (PermissionError, IsADirectoryError, NotADirectoryError) as err:
            click.echo(f"error: {err.strerror}: {err.filename}", err=True)
            sys.exit(EXIT_NOT_FOUND)

    return wrapper  # type: ignore[return-value]
