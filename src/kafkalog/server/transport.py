"""The asyncio transport of ``kafkalog serve``: one listener's sockets in and out, one
Transport per listener, all sharing one RequestChannel.

Why: the event loop only moves bytes. Each frame goes to the one request door
(``KafkaApis.handle``), which decodes it, checks it, runs it where its API runs and encodes
the answer; the transport writes that answer back, a Fetch's file slices with ``sendfile``.
Each connection's requests are answered one at a time, in order, as Kafka's broker mutes a
channel until its response is sent; ``queued.max.requests`` bounds the frames read and not
answered across all connections of every listener, and a fetch parked for data holds no
slot of it; ``max.connections`` and ``max.connections.per.ip`` count every listener too.

Refuses: frames over ``socket.request.max.bytes`` (``sasl.server.max.receive.size`` before
login) and requests the door cannot parse: it logs why and closes that connection, as Kafka
does. One connection's failure never stops the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kafkalog.errors import InvalidConfigError
from kafkalog.protocol.fetch_frame import FetchFrame, OpenSlice
from kafkalog.protocol.wire import FrameReader, InvalidRequestError
from kafkalog.server.apis import AuthenticationFailedError, KafkaApis
from kafkalog.server.context import BrokerSettings, ServedListener
from kafkalog.server.principal import Peer, principal_mapper, subject_dn
from kafkalog.server.sasl import SaslSession

logger = logging.getLogger("kafkalog.server")

READ_CHUNK = 1 << 16
# Complete frames a connection may have waiting behind the one being answered. Kafka reads
# one request per connection and mutes it until the answer is sent; one frame read ahead
# keeps the worker busy while a connection's memory stays a few frames of
# socket.request.max.bytes at most.
READ_AHEAD = 1


class RequestChannel:
    """What every listener's transport shares (Kafka's RequestChannel and ConnectionQuotas):
    ``queued.max.requests`` across all connections, and the connection counts that
    ``max.connections`` and ``max.connections.per.ip`` bound."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.slots = asyncio.Semaphore(settings.queued_max_requests)
        self.queued_requests = 0  # frames read and not yet answered
        self.connections = 0
        self._per_address: dict[str, int] = {}  # open connections by client address

    async def acquire_slot(self) -> None:
        await self.slots.acquire()
        self.queued_requests += 1

    def release_slot(self) -> None:
        self.queued_requests -= 1
        self.slots.release()

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
        self._max_request = self.context.settings.max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        self._map_principal = principal_mapper(listener.security.principal_mapping_rules)

    async def start(self) -> None:
        bind = self.listener.bind
        try:
            self._server = await asyncio.start_server(
                self._accept,
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
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else ""
        refused = self.channel.over_limit(address)
        if refused is not None:
            logger.info("refused a connection from %s: %s", peer, refused)
            writer.close()
            return
        self._connections.add(task)
        self.channel.opened(address)
        try:
            await self._serve(reader, writer, self._peer(writer, address))
        except InvalidRequestError as err:
            logger.warning("closing connection from %s: %s", peer, err)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            logger.exception("closing connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(task)
            self.channel.closed(address)
            writer.close()

    def _peer(self, writer: asyncio.StreamWriter, address: str) -> Peer:
        """Who the connection is before any SASL login: on an SSL listener, the subject of
        the client's certificate as ``ssl.principal.mapping.rules`` maps it (one no rule
        maps fails authentication: the connection is closed, as Kafka closes it)."""
        name = self.listener.name
        security = self.listener.security
        certificate = writer.get_extra_info("peercert")
        if security.protocol != "SSL" or not certificate:
            return Peer(name, address)
        dn = subject_dn(certificate)
        mapped = self._map_principal(dn)
        if mapped is None:
            raise InvalidRequestError(f"no ssl.principal.mapping.rules rule maps {dn!r}")
        return Peer(name, address, f"User:{mapped}")

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer
    ) -> None:
        """Read frames ahead (``READ_AHEAD`` behind the one being answered; reading, and so
        the client's TCP window, pauses beyond that, or while the whole server holds
        ``queued.max.requests`` unanswered frames) while another task answers them in order.
        When the client closes, the requests it did not wait for are dropped, as Kafka drops a
        closed channel's responses; an append already running on a worker thread completes."""
        queue: asyncio.Queue[bytes] = asyncio.Queue(READ_AHEAD)
        held = [0]  # this connection's share of queued.max.requests
        context = self.context
        security = self.listener.security
        session = SaslSession(security, context.scram_credentials) if security.sasl else None
        active = _Activity(asyncio.get_running_loop())
        reading = asyncio.create_task(self._read_frames(reader, queue, held, session, active))
        answering = asyncio.create_task(self._answer(queue, writer, held, session, active, peer))
        # a task of its own, not a timeout around each read: asyncio.wait_for in Python 3.11
        # can swallow the cancellation that stops a connection (gh-86296)
        watching = asyncio.create_task(
            active.watch(context.settings.connections_max_idle_ms / 1000)
        )
        tasks = (reading, answering, watching)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            for _ in range(held[0]):  # frames read and never answered
                self.channel.release_slot()
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome

    async def _read_frames(
        self,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[bytes],
        held: list[int],
        session: SaslSession | None,
        active: _Activity,
    ) -> None:
        """Frames of at most ``socket.request.max.bytes``, and of ``sasl.server.max.receive.size``
        while a SASL client has not authenticated (CVE-2022-34917: before login nobody may make
        the server hold a large buffer). A connection with no bytes in or out for
        ``connections.max.idle.ms`` is closed, a half-sent frame's too (Kafka's Selector)."""
        settings = self.context.settings
        frames = FrameReader(self._max_request)
        while data := await reader.read(READ_CHUNK):
            active.touch()
            if session is not None and not session.authenticated:
                frames.max_size = min(self._max_request, settings.sasl_max_receive_size)
            else:
                frames.max_size = self._max_request
            frames.feed(data)
            while (frame := frames.next_frame()) is not None:
                await self.channel.acquire_slot()
                held[0] += 1
                await queue.put(frame)

    async def _answer(
        self,
        queue: asyncio.Queue[bytes],
        writer: asyncio.StreamWriter,
        held: list[int],
        session: SaslSession | None,
        active: _Activity,
        peer: Peer,
    ) -> None:
        muted_until = [0.0]  # a client quota's throttle: no request of it runs before then

        def throttled(ms: int) -> None:  # from a handler thread too: one float, under the GIL
            muted_until[0] = max(muted_until[0], time.monotonic() + ms / 1000)

        while True:
            frame = await queue.get()
            if (wait := muted_until[0] - time.monotonic()) > 0:
                await asyncio.sleep(wait)  # KIP-219: muted once the throttled answer is sent
            release = _Slot(held, self.channel.release_slot).release
            try:
                try:
                    response = await self.apis.handle(frame, session, release, peer, throttled)
                except AuthenticationFailedError as failed:
                    release()
                    writer.write(failed.response)  # Kafka's error and message, then close
                    await writer.drain()
                    # connection.failed.authentication.delay.ms: a guesser's next try waits
                    delay = self.context.settings.failed_authentication_delay_ms
                    await asyncio.sleep(delay / 1000)
                    raise
                if isinstance(response, FetchFrame):
                    try:
                        await self._send_fetch(response, writer)
                    finally:
                        response.close()
                elif response is not None:
                    writer.write(response)
                    await writer.drain()
                active.touch()
            finally:
                release()

    async def _send_fetch(self, frame: FetchFrame, writer: asyncio.StreamWriter) -> None:
        """The frame's bytes, and each slice straight from its file (``os.sendfile`` on a
        plain socket; asyncio falls back to read-and-write where it cannot, as under TLS)."""
        loop = asyncio.get_running_loop()
        for part in frame.parts:
            if not isinstance(part, OpenSlice):
                writer.write(part)
                continue
            await writer.drain()
            with open(part.fd, "rb", buffering=0, closefd=False) as file:
                sent = await loop.sendfile(writer.transport, file, part.position, part.size)
            if sent != part.size:  # the file was cut under us: the frame cannot be finished
                raise ConnectionError(f"sent {sent} of {part.size} fetched bytes")
        await writer.drain()


class _Slot:
    """A frame's share of queued.max.requests, given back once: when it is answered, or as
    soon as it parks to wait for data (Kafka's fetch purgatory holds no request-queue slot,
    so a thousand long polls cannot shut out a new client)."""

    def __init__(self, held: list[int], release_slot: Callable[[], None]) -> None:
        self._held = held
        self._release_slot: Callable[[], None] | None = release_slot

    def release(self) -> None:
        if self._release_slot is not None:
            self._held[0] -= 1
            self._release_slot()
            self._release_slot = None


class _Activity:
    """When a connection last moved bytes either way (for connections.max.idle.ms)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.last = loop.time()

    def touch(self) -> None:
        self.last = self.loop.time()

    async def watch(self, idle_s: float) -> None:
        """Raise ConnectionError once no bytes have moved for ``idle_s`` seconds."""
        while (remaining := self.last + idle_s - self.loop.time()) > 0:
            await asyncio.sleep(remaining)
        raise ConnectionError(f"idle for connections.max.idle.ms ({idle_s * 1000:.0f})")
