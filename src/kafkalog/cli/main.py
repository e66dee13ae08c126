"""The ``kafkalog`` command (also ``python -m kafkalog``): one entry point, many subcommands.

Why: people inspect, repair and exercise logs from a shell with the tools Kafka taught them
(kafka-dump-log, kafka-topics, the console producer and consumer). Every subcommand turns a
kafkalog error into one line on stderr and a distinct exit code — never a traceback for a user
error. Refuses: doing storage work itself (it calls the library) and guessing at bad input.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from kafkalog.cli.dump_decoders import STRING_DECODER, decoder_for
from kafkalog.cli.dump_index import dump_files
from kafkalog.cli.dump_log import DEFAULT_MAX_MESSAGE_SIZE, DumpOptions, DumpReport, Output
from kafkalog.cli.errors import user_errors
from kafkalog.errors import (
    InvalidArgumentError,
)
from kafkalog.types import INT32_MAX


def parse_kafka_version(text: str) -> tuple[int, int]:
    """``--kafka-version``: a release such as 3.9 or 4.3 (a patch number is ignored)."""
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise InvalidArgumentError(f"--kafka-version {text!r} is not a release like 3.9 or 4.3")
    version = (int(parts[0]), int(parts[1]))
    if version < (3, 0):
        raise InvalidArgumentError(f"--kafka-version {text}: only Kafka 3.x and 4.x are matched")
    return version


# Every other subcommand, imported when it runs or --help lists it: the perf tools bring pyarrow,
# serve asyncio, verify rich, and a dump must print its first line without paying for them.
LAZY_COMMANDS = {
    "topics": "kafkalog.cli.topics:topics",
    "configs": "kafkalog.cli.tools:configs",
    "get-offsets": "kafkalog.cli.tools:get_offsets",
    "delete-records": "kafkalog.cli.tools:delete_records",
    "log-dirs": "kafkalog.cli.tools:log_dirs",
    "verify": "kafkalog.cli.admin:verify",
    "recover": "kafkalog.cli.admin:recover",
    "retention": "kafkalog.cli.admin:retention",
    "compact": "kafkalog.cli.admin:compact",
    "produce": "kafkalog.cli.console:produce",
    "consume": "kafkalog.cli.console:consume",
    "perf": "kafkalog.cli.perf:perf",
    "serve": "kafkalog.cli.serve:serve",
}


class LazyGroup(click.Group):
    """A group whose listed subcommands are imported by name only when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in LAZY_COMMANDS:
            return command
        module, _, attr = LAZY_COMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command) and command.name == cmd_name, cmd_name
        self.add_command(command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafkalog")
def cli() -> None:
    """Kafka-format log directories from the shell: dump, inspect, verify, repair, produce,
    consume, run retention or compaction on demand, and serve them to Kafka clients."""
    configure_logging()


# Kafka's tools log warnings and errors to stderr as "[time] LEVEL message (logger)"
LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes (a test runner swaps it)."""

    kafkalog_cli = True

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging() -> None:
    """One stderr handler on the ``kafkalog`` logger, installed once however many commands a
    process runs (the tests invoke many): without it Python's last-resort handler printed
    warnings bare, and a second handler would print each one twice."""
    logger = logging.getLogger("kafkalog")
    if not any(getattr(h, "kafkalog_cli", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


@cli.command("dump-log")
@click.option("--files", required=True, help="Comma-separated .log/.index/.timeindex/... files.")
@click.option("--deep-iteration", is_flag=True, help="One line per record, not only per batch.")
@click.option("--print-data-log", is_flag=True, help="Print keys and values (implies deep).")
@click.option("--skip-record-metadata", is_flag=True, help="Omit the per-record metadata.")
@click.option("--verify-index-only", is_flag=True, help="Index files: print only mismatches.")
@click.option("--index-sanity-check", is_flag=True, help="Index files: sanity check only.")
@click.option("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE, show_default=True)
@click.option("--max-bytes", type=int, default=None, help="Examine only the first N bytes.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch.")
@click.option(
    "--offsets-decoder", is_flag=True, help="Decode __consumer_offsets records (implies data)."
)
@click.option(
    "--transaction-log-decoder",
    is_flag=True,
    help="Decode __transaction_state records (implies data).",
)
@click.option(
    "--cluster-metadata-decoder",
    is_flag=True,
    help="Decode KRaft __cluster_metadata records and snapshots (implies data).",
)
@click.option(
    "--share-group-state-decoder",
    is_flag=True,
    help="Decode __share_group_state records (implies data).",
)
@click.option(
    "--remote-log-metadata-decoder",
    is_flag=True,
    help="Decode __remote_log_metadata records, tiered storage's (implies data).",
)
@click.option(
    "--key-decoder-class",
    is_flag=False,
    flag_value=STRING_DECODER,
    default=None,
    help="Kafka's StringDecoder, IntegerDecoder or LongDecoder for keys (implies data).",
)
@click.option(
    "--value-decoder-class",
    is_flag=False,
    flag_value=STRING_DECODER,
    default=None,
    help="The same for values (implies data).",
)
@click.option(
    "--kafka-version",
    default="4.3",
    show_default=True,
    help="Print what this Kafka release's kafka-dump-log prints where releases differ "
    "(3.9: the text transaction-log decoder and the old --skip-record-metadata indent).",
)
@user_errors
def dump_log_cmd(
    files: str,
    deep_iteration: bool,
    print_data_log: bool,
    skip_record_metadata: bool,
    verify_index_only: bool,
    index_sanity_check: bool,
    max_message_size: int,
    max_bytes: int | None,
    as_json: bool,
    offsets_decoder: bool,
    transaction_log_decoder: bool,
    cluster_metadata_decoder: bool,
    share_group_state_decoder: bool,
    remote_log_metadata_decoder: bool,
    key_decoder_class: str | None,
    value_decoder_class: str | None,
    kafka_version: str,
) -> None:
    """Print segments, indexes, txn indexes and producer snapshots as kafka-dump-log does.

    \b
    Example:
      kafkalog dump-log --files data/clicks-0/00000000000000000000.log --print-data-log
    """
    chosen = {"offsets": offsets_decoder, "transactions": transaction_log_decoder,
              "cluster-metadata": cluster_metadata_decoder,
              "share-group-state": share_group_state_decoder,
              "remote-log-metadata": remote_log_metadata_decoder}  # fmt: skip
    decoders = [name for name, on in chosen.items() if on]
    if len(decoders) > 1:
        raise InvalidArgumentError(
            "choose one of --offsets-decoder, --transaction-log-decoder, "
            "--cluster-metadata-decoder, --share-group-state-decoder and "
            "--remote-log-metadata-decoder"
        )
    options = DumpOptions(
        deep_iteration=deep_iteration,
        print_data_log=print_data_log,
        skip_record_metadata=skip_record_metadata,
        verify_index_only=verify_index_only,
        index_sanity_check=index_sanity_check,
        max_message_size=max_message_size,
        max_bytes=INT32_MAX if max_bytes is None else max_bytes,
        max_bytes_given=max_bytes is not None,
        json=as_json,
        decoder=decoders[0] if decoders else None,
        key_decoder=key_decoder_class,
        value_decoder=value_decoder_class,
        kafka_version=parse_kafka_version(kafka_version),
    )
    for option, name in (("--key-decoder-class", key_decoder_class),
                         ("--value-decoder-class", value_decoder_class)):  # fmt: skip
        if name is not None:
            decoder_for(option, name)  # refuse an unknown class before any output

    report = DumpReport(out=Output(click.echo))  # stdout lines as they come
    dump_files([f for f in files.split(",") if f], options, report)
    for line in report.err:
        click.echo(line, err=True)


def main() -> None:
    cli(prog_name="kafkalog")
