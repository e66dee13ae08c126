"""Starting and stopping a broker: the LogManager with its background tasks, the protocol core
and the transport, as ``kafkalog serve`` runs them or as a test embeds them.

Why: both forms must start and stop the same way: load (recovering after a crash), start the
background tasks, listen, log the readiness line; on stop, stop listening, finish the requests
in progress, then close the logs, which writes the clean-shutdown marker.

Refuses: to listen before the logs are loaded, and to leave the logs open when start-up fails.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafkalog.coordinator.group_coordinator import GroupCoordinator
from kafkalog.coordinator.share_partitions import SharePartitions, ShareStateSettings
from kafkalog.coordinator.txn_coordinator import TransactionCoordinator
from kafkalog.errors import InvalidArgumentError, KafkaLogError
from kafkalog.manager import LogManager
from kafkalog.manager.remote_log_manager import RemoteLogManager
from kafkalog.manager.server_config import ServerConfig
from kafkalog.server.acl_store import load_acls
from kafkalog.server.apis import Broker, KafkaApis
from kafkalog.server.authorizer import StandardAuthorizer
from kafkalog.server.context import (
    STANDARD_AUTHORIZER,
    BrokerContext,
    BrokerSettings,
    Listener,
    ServedListener,
)
from kafkalog.server.handler_pool import RequestHandlerPool
from kafkalog.server.producer_ids import ProducerIdManager
from kafkalog.server.purgatory import FetchPurgatory
from kafkalog.server.quotas import QuotaManager, load_quotas
from kafkalog.server.remote_reads import RemoteReaderPool
from kafkalog.server.scram_store import load_credentials
from kafkalog.server.share_fetch import ShareFetchHandler
from kafkalog.server.transport import RequestChannel, Transport
from kafkalog.storage.atomic import write_atomically
from kafkalog.storage.meta_properties import read_meta_properties
from kafkalog.storage.partition_metadata import random_topic_id

logger = logging.getLogger("kafkalog.server")


CLUSTER_ID_FILE = "kafkalog-cluster-id"


def _cluster_id(log_dirs: list[Path]) -> str:
    """The ``cluster.id`` of a Kafka ``meta.properties`` in the log dirs; else the one kafkalog
    chose at the first start, kept in ``kafkalog-cluster-id`` beside the data (a file a Kafka
    broker ignores: ``meta.properties`` is written by ``kafka-storage format``). Clients take a
    cluster id that changes for a different cluster."""
    found = read_meta_properties(log_dirs).get("cluster.id")
    if found:
        return found
    for d in log_dirs:
        try:
            kept = (d / CLUSTER_ID_FILE).read_text("ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if kept:
            return kept
    chosen = random_topic_id()
    write_atomically(log_dirs[0] / CLUSTER_ID_FILE, chosen.encode("ascii"))
    return chosen


class KafkaServer:
    """One broker over one set of log directories. Use ``async with`` or ``start``/``stop``
    from a running event loop; ``run_until_stopped`` is what ``kafkalog serve`` runs."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.settings = BrokerSettings.from_server_config(config)
        self.manager: LogManager | None = None
        self._transports: list[Transport] = []
        self._channel: RequestChannel | None = None
        self._pool: RequestHandlerPool | None = None
        self._groups: GroupCoordinator | None = None
        self._share_partitions: SharePartitions | None = None
        self._transactions: TransactionCoordinator | None = None
        self._stop_event: asyncio.Event | None = None
        self._remote: RemoteLogManager | None = None  # tiered storage, when the broker allows
        self._remote_reader: RemoteReaderPool | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop it runs on, once started

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the first listener."""
        return self.bootstrap_servers_for(self.settings.listeners[0].name)

    def bootstrap_servers_for(self, listener: str) -> str:
        """``host:port`` the listener named ``listener`` is bound to."""
        if not self._transports or self.manager is None:
            raise KafkaLogError("the server is not running")
        for transport in self._transports:
            if transport.listener.name == listener.upper():
                return f"{transport.listener.bind.host or '127.0.0.1'}:{transport.port}"
        raise KafkaLogError(f"the server has no listener named {listener}")

    @property
    def queued_requests(self) -> int:
        """Request frames read and not yet answered, across every listener."""
        return 0 if self._channel is None else self._channel.queued_requests

    @property
    def parked_fetches(self) -> int:
        """Fetches waiting for data, holding no request slot."""
        return 0 if self._transports == [] else self._transports[0].apis.purgatory.parked

    @property
    def waiting_remote_reads(self) -> int:
        """Remote reads queued for a reader thread (remote.log.reader.max.pending.tasks)."""
        return 0 if self._remote_reader is None else self._remote_reader.pending

    @property
    def watched_partitions(self) -> int:
        """Partitions some fetch is watching for an append (parked, or being tried)."""
        if self._transports == []:
            return 0
        return self._transports[0].apis.purgatory.watched_partitions

    async def start(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        manager = await loop.run_in_executor(
            None,
            functools.partial(
                LogManager.from_server_config, self.config, coordinated_transactions=True
            ),
        )
        try:
            if manager.config.remote.remote_log_storage_system_enable:
                self._remote = await loop.run_in_executor(
                    None,
                    functools.partial(
                        RemoteLogManager.from_config, manager, broker_id=self.config.broker.node_id
                    ),
                )
            logs = manager.logs().values()
            in_use = (pid for log in logs for pid in log.producers())
            producer_ids = ProducerIdManager(self.config.log_dirs, in_use)
            context = BrokerContext(
                manager, self.settings, producer_ids, _cluster_id(self.config.log_dirs)
            )
            context.broker_properties = self.config.properties
            if self._remote is not None:
                reads = manager.config.remote
                context.remote_reader = self._remote_reader = RemoteReaderPool(
                    reads.remote_log_reader_threads, reads.remote_log_reader_max_pending_tasks
                )
            if any(served.security.sasl for served in self.settings.listeners):
                context.scram_credentials = load_credentials(self.config.log_dirs[0])
            context.quotas = QuotaManager(
                load_quotas(self.config.log_dirs[0], manager.metadata_log.quotas),
                samples=self.settings.quota_window_num,
                window_seconds=self.settings.quota_window_size_seconds,
            )
            if self.settings.authorizer:
                context.authorizer = StandardAuthorizer(
                    load_acls(self.config.log_dirs[0], manager.metadata_log.acls),
                    super_users=self.settings.super_users,
                    allow_everyone_if_no_acl_found=self.settings.allow_everyone_if_no_acl_found,
                )
            apis = await self._build(context)
            channel = self._channel = RequestChannel(self.settings)
            transports = [Transport(apis, served, channel) for served in self.settings.listeners]
            try:
                for transport in transports:
                    await transport.start()
            except BaseException:
                for transport in transports:
                    await transport.close()
                await self._stop_coordinators()
                raise
        except BaseException:
            await loop.run_in_executor(None, manager.close)
            raise
        for transport in transports:
            served = transport.listener
            if served.advertised is None or served.advertised.port == 0:
                shown = served.advertised or served.bind
                context.advertised[served.name] = Listener(
                    shown.security_protocol, shown.host or "127.0.0.1", transport.port, shown.name
                )
        manager.start()
        if self._remote is not None:
            self._remote.start()
        self.manager, self._transports = manager, transports
        for transport in transports:
            _warn_if_open(transport.listener, transport.port, self.settings.authorizer)
        logger.info(
            "kafkalog serve started: listening on %s, advertised as %s, log dirs %s",
            ", ".join(
                Listener(
                    t.listener.bind.security_protocol,
                    t.listener.bind.host,
                    t.port,
                    t.listener.bind.name,
                ).url()
                for t in transports
            ),
            ", ".join(context.advertised[t.listener.name].url() for t in transports),
            ",".join(str(d) for d in self.config.log_dirs),
        )

    async def _build(self, context: BrokerContext) -> KafkaApis:
        """Everything a broker runs, once per process: the worker pool, the coordinators
        (loaded from their internal topics), the fetch purgatory and the request door."""
        pool = self._pool = RequestHandlerPool(
            self.settings.io_threads, asyncio.get_running_loop(), "kafkalog-io"
        )
        run = pool.run

        groups = self._groups = GroupCoordinator(context, run)
        transactions = self._transactions = TransactionCoordinator(context, run, groups)
        purgatory = FetchPurgatory(context, run)
        purgatory.start()
        await groups.start()
        await transactions.start()
        context.transactions = transactions
        settings = self.settings
        share_partitions = self._share_partitions = SharePartitions(
            context, groups.share, run,
            ShareStateSettings(settings.share_state_partitions,
                               settings.share_updates_per_snapshot),
            context.broker_properties,
        )  # fmt: skip
        await share_partitions.start()
        share_fetch = ShareFetchHandler(
            context, share_partitions, run, lambda: purgatory.signal, settings.share_max_sessions
        )
        return KafkaApis(Broker(context), groups, transactions, purgatory, run, share_fetch)

    async def _stop_coordinators(self) -> None:
        if self._share_partitions is not None:
            await self._share_partitions.stop()
            self._share_partitions = None
        if self._transactions is not None:
            await self._transactions.stop()
        if self._groups is not None:
            await self._groups.stop()
        if self._pool is not None:
            self._pool.shutdown()
        self._groups = self._transactions = None
        self._pool = None

    async def stop(self) -> None:
        transports, manager = self._transports, self.manager
        self._transports = []
        for transport in transports:
            await transport.close()
        await self._stop_coordinators()
        remote, self._remote = self._remote, None
        if remote is not None:
            await asyncio.get_running_loop().run_in_executor(None, remote.close)
        reader, self._remote_reader = self._remote_reader, None
        if reader is not None:
            reader.shutdown()
        if manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, manager.close)
            logger.info("kafkalog serve stopped; the logs were closed cleanly")

    def request_stop(self) -> None:
        """Ask ``run_until_stopped`` to return (call on the server's loop)."""
        self._stop_requested().set()

    def _stop_requested(self) -> asyncio.Event:
        if self._stop_event is None:
            self._stop_event = asyncio.Event()
        return self._stop_event

    async def run_until_stopped(self) -> None:
        await self.start()
        try:
            await self._stop_requested().wait()
        finally:
            await self.stop()


def server_config(
    log_dirs: str | Path | Sequence[str | Path] | None = None,
    *,
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    port: int | None = None,
) -> ServerConfig:
    """A ServerConfig from a ``server.properties`` (or mapping), overrides on top, with
    ``log_dirs`` and ``port`` as the last word (``port`` is the first listener's, which keeps
    its name and host: ``SASL_SSL://127.0.0.1:0`` with port 0 is a SASL_SSL listener on any
    port)."""
    merged: dict[str, Any] = dict(overrides or {})
    if log_dirs is not None:
        dirs = [log_dirs] if isinstance(log_dirs, str | Path) else list(log_dirs)
        if not dirs:
            raise InvalidArgumentError("log_dirs is empty")
        merged["log.dirs"] = ",".join(str(d) for d in dirs)
    if port is not None:  # the first listener (its name and host) on ``port``, the rest kept
        given = str(merged.get("listeners", "PLAINTEXT://127.0.0.1:0")).split(",")
        name, _, address = given[0].partition("://")
        host = address.rpartition(":")[0] or "127.0.0.1"
        merged["listeners"] = ",".join([f"{name}://{host}:{port}", *given[1:]])
    return ServerConfig.from_properties(config if config is not None else {}, merged)


@contextmanager
def serve(
    log_dirs: str | Path | Sequence[str | Path],
    *,
    port: int = 0,
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Iterator[KafkaServer]:
    """Run a broker on a background thread for the ``with`` block::

        with kafkalog.serve("/data/logs") as server:
            KafkaProducer(bootstrap_servers=server.bootstrap_servers)

    ``port=0`` takes any free port. The logs are closed cleanly when the block ends."""
    server = KafkaServer(server_config(log_dirs, config=config, overrides=overrides, port=port))
    started = threading.Event()
    failure: list[BaseException] = []
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        try:
            await server.start()
        except BaseException as err:
            failure.append(err)
            started.set()
            return
        started.set()
        try:
            await server._stop_requested().wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="kafkalog-serve")
    thread.start()
    started.wait()
    if failure:
        thread.join()
        raise failure[0]
    try:
        yield server
    finally:
        loop_box[0].call_soon_threadsafe(server.request_stop)
        thread.join()


def _loopback(host: str) -> bool:
    return host in {"localhost", "::1"} or host.startswith("127.")


def _warn_if_open(served: ServedListener, port: int, authorizer: bool) -> None:
    """Kafka starts such a broker silently; a shared one should not be left open unnoticed.
    Without an authorizer: a listener other hosts can reach without authenticating, or any
    authenticated one (its every user may do everything)."""
    if authorizer:
        return
    if not served.security.authenticated and not _loopback(served.bind.host):
        logger.warning(
            "the %s listener on port %d accepts clients from other hosts without "
            "authentication: anyone who can reach it can read and write every topic (use "
            "SASL_SSL, SASL_PLAINTEXT or SSL with ssl.client.auth=required, or bind it to "
            "127.0.0.1)",
            served.name,
            port,
        )
    elif served.security.authenticated:
        logger.warning(
            "the %s listener on port %d authenticates its clients but nothing authorizes "
            "them: every user may read, write and change everything (set "
            "authorizer.class.name=%s and add ACLs)",
            served.name,
            port,
            STANDARD_AUTHORIZER,
        )
