"""The asyncio transport of ``kafkalog serve``: one listener's sockets in and out, one
Transport per listener, all sharing one RequestChannel.

Why: the event loop only moves bytes. Each connection (``Connection``) cuts frames and hands
each to the one request door (``KafkaApis``), which decodes it, checks it, runs it where its
API runs and encodes the answer; the connection writes that answer back, a Fetch's file
slices with ``sendfile``. Each connection's requests are answered one at a time, in order,
as Kafka's broker mutes a channel until its response is sent; ``queued.max.requests``
bounds the frames read and not answered across all connections of every listener, and a
fetch parked for data holds no slot of it; ``max.connections`` and
``max.connections.per.ip`` count every listener too.

Refuses: frames over ``socket.request.max.bytes`` (``sasl.server.max.receive.size`` before
login) and requests the door cannot parse: it logs why and closes that connection, as Kafka
does. One connection's failure never stops the server.
"""

from __future__ import annotations

import asyncio

from kafkalog.errors import InvalidConfigError
from kafkalog.protocol.wire import InvalidRequestError
from kafkalog.server.apis import KafkaApis
from kafkalog.server.connection import Connection
from kafkalog.server.context import BrokerSettings, ServedListener
from kafkalog.server.principal import Peer, principal_mapper, subject_dn


class RequestChannel:
    """What every listener's transport shares (Kafka's RequestChannel and ConnectionQuotas):
    ``queued.max.requests`` across all connections, and the connection counts that
    ``max.connections`` and ``max.connections.per.ip`` bound."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.queued_requests = 0  # frames read and not yet answered
        self.connections = 0
        self._per_address: dict[str, int] = {}  # open connections by client address
        self._waiting: set[Connection] = set()  # stopped reading until a slot is free

    @property
    def full(self) -> bool:
        return self.queued_requests >= self.settings.queued_max_requests

    def take_slot(self) -> None:
        self.queued_requests += 1

    def release_slot(self) -> None:
        self.queued_requests -= 1
        if self._waiting and not self.full:
            waiting, self._waiting = self._waiting, set()
            for connection in waiting:
                connection.update_reading()

    def wait_for_slot(self, connection: Connection) -> None:
        self._waiting.add(connection)

    def forget(self, connection: Connection) -> None:
        self._waiting.discard(connection)

    def over_limit(self, address: str) -> str | None:
        """Why a new connection from ``address`` is one too many, or None. Refused
        connections are closed at once: one client's thousands of sockets may not take what
        the others need."""
        settings = self.settings
        if self.connections >= settings.max_connections:
            return f"max.connections ({settings.max_connections}) reached"
        limit = settings.max_connections_per_ip_overrides.get(
            address, settings.max_connections_per_ip
        )
        if self._per_address.get(address, 0) >= limit:
            return f"max.connections.per.ip ({limit}) reached for {address}"
        return None

    def opened(self, address: str) -> None:
        self.connections += 1
        self._per_address[address] = self._per_address.get(address, 0) + 1

    def closed(self, address: str) -> None:
        self.connections -= 1
        left = self._per_address.get(address, 1) - 1
        if left:
            self._per_address[address] = left
        else:
            self._per_address.pop(address, None)


class Transport:
    """Serves one listener for the request door ``apis``. Start with ``start()``; ``close()``
    stops accepting, drops the connections and waits for the requests in progress."""

    def __init__(self, apis: KafkaApis, listener: ServedListener, channel: RequestChannel) -> None:
        self.apis = apis
        self.context = apis.context
        self.listener = listener
        self.channel = channel
        self.max_request = self.context.settings.max_request_bytes
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()
        self.port = 0
        self._map_principal = principal_mapper(listener.security.principal_mapping_rules)

    async def start(self) -> None:
        bind = self.listener.bind
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: Connection(self),
                bind.host or None,
                bind.port,
                reuse_address=True,
                ssl=self.listener.security.ssl_context,
            )
        except OSError as err:
            raise InvalidConfigError(
                "listeners", f"cannot listen on {bind.url()}: {err.strerror or err}"
            ) from err
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        connections = list(self.connections)
        for connection in connections:
            connection.abort()
        await asyncio.gather(*(c.finished() for c in connections), return_exceptions=True)

    def peer(self, transport: asyncio.BaseTransport, address: str, connection_id: str) -> Peer:
        """Who the connection is before any SASL login: on an SSL listener, the subject of
        the client's certificate as ``ssl.principal.mapping.rules`` maps it (one no rule
        maps fails authentication: the connection is closed, as Kafka closes it)."""
        name = self.listener.name
        security = self.listener.security
        certificate = transport.get_extra_info("peercert")
        if security.protocol != "SSL" or not certificate:
            return Peer(name, address, connection_id=connection_id)
        dn = subject_dn(certificate)
        mapped = self._map_principal(dn)
        if mapped is None:
            raise InvalidRequestError(f"no ssl.principal.mapping.rules rule maps {dn!r}")
        return Peer(name, address, f"User:{mapped}", connection_id)
