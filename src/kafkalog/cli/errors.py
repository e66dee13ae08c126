"""How the ``kafkalog`` command reports a user's mistake: one line on stderr, a distinct exit code.

Why: every subcommand, in whichever module it lives, must turn a kafkalog error into the same
kind of line and code, never a traceback. Refuses: catching anything a user cannot cause.
"""

from __future__ import annotations

import errno
import resource
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
            click.echo(f"error: {err}{_open_file_limit_hint(err)}", err=True)
            sys.exit(_exit_code(err))
        except FileNotFoundError as err:
            click.echo(f"error: no such file or directory: {err.filename}", err=True)
            sys.exit(EXIT_NOT_FOUND)
        except (PermissionError, IsADirectoryError, NotADirectoryError) as err:
            click.echo(f"error: {err.strerror}: {err.filename}", err=True)
            sys.exit(EXIT_NOT_FOUND)
        except OSError as err:  # what a user can cause: too few descriptors allowed
            hint = _open_file_limit_hint(err)
            if not hint:
                raise
            click.echo(f"error: {err}{hint}", err=True)
            sys.exit(EXIT_INVALID)

    return wrapper  # type: ignore[return-value]


def _open_file_limit_hint(err: BaseException) -> str:
    """What to do when the process ran out of descriptors (EMFILE anywhere in the error's
    chain, or named in a log directory's offline reason): the limit, and how to raise it."""
    seen: BaseException | None = err
    found = False
    while seen is not None and not found:
        found = isinstance(seen, OSError) and seen.errno == errno.EMFILE
        seen = seen.__cause__ or seen.__context__
    if not found and "Too many open files" not in str(err):
        return ""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f" (this process may open {soft} files at most, 'ulimit -n'; kafkalog holds one "
        f"descriptor per segment: raise the limit, up to the hard limit {hard} with "
        "'ulimit -n', past it in /etc/security/limits.conf or systemd's LimitNOFILE)"
    )
