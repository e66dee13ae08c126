"""``kafkalog serve``: run a Kafka-protocol broker over log directories until SIGTERM/SIGINT.

Why: Kafka's own clients and tools (and librdkafka, kafka-python, aiokafka, ...) should reach
the same log directories the CLI and the Spark source read. Takes the broker's
``server.properties`` and ``--override key=value`` as ``kafka-server-start.sh`` does.
Refuses: to start on a log directory another process holds (the directory lock says who).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from kafkalog.server import KafkaServer

from kafkalog.cli.errors import user_errors
from kafkalog.storage.meta_properties import read_meta_properties


@click.command("serve")
@click.option(
    "--log-dirs", default=None, help="Comma-separated log directories (else log.dirs/log.dir)."
)
@click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), default=None,
    help="A broker's server.properties.",
)  # fmt: skip
@click.option(
    "--override", "overrides", multiple=True, metavar="KEY=VALUE",
    help="A broker key that beats --config (repeatable), as kafka-server-start.sh --override.",
)  # fmt: skip
@click.option(
    "--add-scram", "add_scram", multiple=True, metavar="MECHANISM=[name=U,password=P]",
    help="Add or replace a SASL/SCRAM user first, as kafka-storage format --add-scram "
    "(repeatable), e.g. 'SCRAM-SHA-256=[name=alice,password=alice-secret]'.",
)  # fmt: skip
@user_errors
def serve(
    log_dirs: str | None,
    config_file: str | None,
    overrides: tuple[str, ...],
    add_scram: tuple[str, ...],
) -> None:
    """Serve the log directories over Kafka's wire protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
    SASL_SSL; SASL with PLAIN and SCRAM-SHA-256/512).

    \b
    Example:
      kafkalog serve --log-dirs data --override listeners=PLAINTEXT://127.0.0.1:9092
      kafka-console-producer.sh --bootstrap-server 127.0.0.1:9092 --topic clicks
    """
    # loaded here, not with the CLI: the protocol codecs take a third of a second to import
    from kafkalog.server import KafkaServer, server_config  # noqa: PLC0415

    pairs: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--override")
        pairs[key.strip()] = value
    dirs = [d for d in log_dirs.split(",") if d] if log_dirs else None
    config = server_config(dirs, config=config_file, overrides=pairs)
    if add_scram:
        from kafkalog.server import scram_store  # noqa: PLC0415

        first = config.log_dirs[0]
        first.mkdir(parents=True, exist_ok=True)
        credentials = scram_store.load_credentials(first)
        for text in add_scram:
            mechanism, user, credential = scram_store.parse_add_scram(text)
            credentials[(mechanism, user)] = credential
        scram_store.save_credentials(first, credentials)
    logging.getLogger("kafkalog.server").setLevel(logging.INFO)
    logging.getLogger("kafkalog").setLevel(logging.INFO)
    if config_file is None and read_meta_properties(config.log_dirs):
        logging.getLogger("kafkalog.server").warning(
            "%s is a Kafka broker's (meta.properties) and no --config names its "
            "server.properties: Kafka's default topic configs apply to its topics",
            config.log_dirs[0],
        )
    _raise_open_file_limit()
    asyncio.run(_run(KafkaServer(config)))


def _raise_open_file_limit() -> None:
    """The soft limit on open files raised to the hard one, as the JVM raises it for a Kafka
    broker at start (HotSpot's MaxFDLimit, on by default): a broker holds one descriptor per
    segment, and a shell's usual soft limit of 1,024 would stop it near a thousand."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft in (hard, resource.RLIM_INFINITY):
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # an unlimited hard limit past the kernel's nr_open
        return
    logging.getLogger("kafkalog.server").info(
        "raised the open file limit from %d to %d", soft, hard
    )


async def _run(server: KafkaServer) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    await server.run_until_stopped()
