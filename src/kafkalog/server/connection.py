"""One client connection of ``kafkalog serve``: frames cut from the socket and answered in
order, one at a time, as Kafka's broker mutes a channel until its response is sent.

Why an asyncio Protocol and not streams: a request the event loop answers without waiting (a
Produce appended on the loop) is answered inside ``data_received``, in the loop iteration that
read it. Through a StreamReader, a queue and an answering task the same request took three
loop iterations, two task wake-ups, a queue and a semaphore: measured under one 1 KiB
producer, that machinery held the GIL for about a third of the broker's busy time. Every
other request, and any request that arrives while one of the connection's is still being
answered, goes to the connection's answering task, in arrival order.

Refuses: to answer a connection's requests out of order or two at a time; to read on while
``READ_AHEAD`` frames wait behind the one being answered, or while the whole server holds
``queued.max.requests`` unanswered frames (reading pauses, and with it the client's TCP
window); to answer before a client quota's mute ends; to let one connection's failure out
of it: it logs why and closes that connection, as Kafka does.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafkalog.protocol.fetch_frame import FetchFrame, OpenSlice
from kafkalog.protocol.wire import FrameReader, InvalidRequestError, Request
from kafkalog.server.apis import AnswerLater, AuthenticationFailedError
from kafkalog.server.principal import Peer
from kafkalog.server.sasl import SaslSession

if TYPE_CHECKING:
    from kafkalog.server.transport import RequestChannel, Transport

logger = logging.getLogger("kafkalog.server")
_CONNECTION_INDEX = itertools.count()  # the last part of each connection's id, as in Kafka

# Complete frames a connection may have waiting behind the one being answered. Kafka reads
# one request per connection and mutes it until the answer is sent; one frame read ahead
# keeps the server busy while a connection's memory stays a few frames of
# socket.request.max.bytes at most.
READ_AHEAD = 1
# Requests one connection may have answered at once in a row before the loop turns to the
# others: a client pipelining thousands of tiny produce frames in one socket read must not
# hold the event loop for all of them.
ANSWERS_PER_TURN = 8


class Connection(asyncio.Protocol):
    """A client's socket on one listener of ``owner``, from accept to close."""

    def __init__(self, owner: Transport) -> None:
        self.owner = owner
        self.apis = owner.apis
        self.channel: RequestChannel = owner.channel
        self.loop = asyncio.get_running_loop()
        self.settings = owner.context.settings
        self.transport: asyncio.Transport | None = None
        self.address = ""
        self.peer = Peer(owner.listener.name, "")
        security = owner.listener.security
        self.session = (
            SaslSession(security, owner.context.scram_credentials) if security.sasl else None
        )
        self.frames = FrameReader(owner.max_request)
        # frames read and not yet answered, each holding a slot of queued.max.requests, with
        # the request already decoded when the loop looked at it and could not answer at once
        self.pending: collections.deque[tuple[bytes, Request | None]] = collections.deque()
        self.busy = False  # the answering task is on a request
        self.muted_until = 0.0  # a client quota's throttle: no request runs before then
        self.last_active = self.loop.time()
        self.reading_paused = False
        self.sending_file = False  # loop.sendfile owns the reading state meanwhile
        self.writing_paused = False
        self.closed = False
        # answers given in this read's turn, sent together at its end: one send for the
        # requests a read brought, not one each (the loopback TCP send cost ~9 us apiece)
        self._unsent: list[bytes] = []
        self._wake: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None

    # --- asyncio's calls ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        name = transport.get_extra_info("peername")
        self.address = str(name[0]) if isinstance(name, tuple) else ""
        refused = self.channel.over_limit(self.address)
        if refused is not None:
            logger.info("refused a connection from %s: %s", name, refused)
            self.closed = True
            transport.abort()
            return
        self.channel.opened(self.address)
        self.owner.connections.add(self)
        try:
            local = transport.get_extra_info("sockname")
            connection_id = f"{_address(local)}-{_address(name)}-{next(_CONNECTION_INDEX)}"
            self.peer = self.owner.peer(transport, self.address, connection_id)
        except InvalidRequestError as err:
            self._fail(f"closing connection from {name}: {err}")
            return
        self.task = self.loop.create_task(self._answer_in_turn())
        self._watch = self.loop.create_task(self._watch_idle())

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_active = self.loop.time()
        frames = self.frames
        session = self.session
        if session is not None and not session.authenticated:
            # CVE-2022-34917: before login nobody may make the server hold a large buffer
            frames.max_size = min(self.owner.max_request, self.settings.sasl_max_receive_size)
        else:
            frames.max_size = self.owner.max_request
        frames.feed(data)
        self.update_reading()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        """The requests the client did not wait for are dropped, as Kafka drops a closed
        channel's responses; an append already running on a handler thread completes."""
        self.closed = True
        for waiter in (self._wake, self._drained):
            if waiter is not None and not waiter.done():
                waiter.set_exception(ConnectionError("connection closed"))
        for task in (self.task, self._watch):
            if task is not None:
                task.cancel()
        for _ in self.pending:  # read and never answered; the one being answered is the task's
            self.channel.release_slot()
        self.pending.clear()
        self.channel.forget(self)
        if self in self.owner.connections:
            self.owner.connections.discard(self)
            self.channel.closed(self.address)
            if self.peer.connection_id:
                self.apis.connection_closed(self.peer.connection_id)

    # --- reading --------------------------------------------------------------------------------

    def update_reading(self) -> None:
        """Cut the frames read so far while fewer than ``READ_AHEAD`` wait and the server has
        room (answering one at once if nothing of this connection is ahead of it, up to
        ``ANSWERS_PER_TURN`` in a row), then pause reading while a whole frame is left uncut,
        read again once none is."""
        if self.closed or self.transport is None:
            return
        try:
            self._cut_and_answer(self.transport)
        finally:
            self._send_unsent()

    def _cut_and_answer(self, transport: asyncio.Transport) -> None:
        frames, pending, channel = self.frames, self.pending, self.channel
        answered = 0
        try:
            while len(pending) <= READ_AHEAD and not channel.full:
                if answered == ANSWERS_PER_TURN:  # the others' turn; this one goes on after
                    self.loop.call_soon(self.update_reading)
                    break
                frame = frames.next_frame()
                if frame is None:
                    break
                request = None
                if not self.busy and not pending and self._may_answer_now():
                    answered += 1
                    answer = self._answer_now(frame)
                    if self.closed:
                        return
                    if not isinstance(answer, AnswerLater):
                        continue
                    request = answer.request
                channel.take_slot()
                pending.append((frame, request))
                if self._wake is not None and not self._wake.done():
                    self._wake.set_result(None)
            waiting = frames.has_frame()
        except InvalidRequestError as err:
            self._fail(f"closing connection from {self.address}: {err}")
            return
        if waiting and channel.full:
            channel.wait_for_slot(self)
        if self.sending_file:  # loop.sendfile pauses and resumes reading itself
            return
        if waiting and not self.reading_paused:
            transport.pause_reading()
            self.reading_paused = True
        elif not waiting and self.reading_paused:
            transport.resume_reading()
            self.reading_paused = False

    # --- answering ------------------------------------------------------------------------------

    def _may_answer_now(self) -> bool:
        if self.writing_paused or self.channel.full:
            return False
        return not self.muted_until or self.muted_until <= time.monotonic()

    def _answer_now(self, frame: bytes) -> bytes | AnswerLater | None:
        """The request answered in this loop iteration if the door can (its answer written),
        or what the answering task needs to answer it in turn."""
        try:
            answer = self.apis.answer_now(frame, self.session, self.peer, self._throttled)
        except InvalidRequestError as err:
            self._fail(f"closing connection from {self.address}: {err}")
            return None
        except Exception:
            logger.exception("closing connection from %s after an unexpected error", self.address)
            self._fail(None)
            return None
        if isinstance(answer, bytes):
            self._unsent.append(answer)
        return answer

    def _send_unsent(self) -> None:
        unsent = self._unsent
        if unsent:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(unsent[0] if len(unsent) == 1 else b"".join(unsent))
            unsent.clear()

    def _throttled(self, ms: int) -> None:  # from a handler thread too: one float, under the GIL
        self.muted_until = max(self.muted_until, time.monotonic() + ms / 1000)

    async def _answer_in_turn(self) -> None:
        try:
            while True:
                while not self.pending:
                    self._wake = self.loop.create_future()
                    await self._wake
                frame, request = self.pending.popleft()
                self.busy = True
                self.update_reading()
                slot = _Slot(self.channel.release_slot)
                try:
                    # KIP-219: muted once the throttled answer is sent
                    if (wait := self.muted_until - time.monotonic()) > 0:
                        await asyncio.sleep(wait)
                    await self._answer(frame, request, slot)
                    self.last_active = self.loop.time()
                finally:
                    slot.release()
                    self.busy = False
        except InvalidRequestError as err:
            self._fail(f"closing connection from {self.address}: {err}")
        except (ConnectionError, asyncio.CancelledError):
            self._fail(None)
        except Exception:
            logger.exception("closing connection from %s after an unexpected error", self.address)
            self._fail(None)

    async def _answer(self, frame: bytes, request: Request | None, slot: _Slot) -> None:
        assert self.transport is not None
        try:
            response = await self.apis.handle(
                frame, self.session, slot.release, self.peer, self._throttled, request
            )
        except AuthenticationFailedError as failed:
            slot.release()
            self.transport.write(failed.response)  # Kafka's error and message, then close
            await self._drain()
            # connection.failed.authentication.delay.ms: a guesser's next try waits
            await asyncio.sleep(self.settings.failed_authentication_delay_ms / 1000)
            raise ConnectionError("authentication failed") from None
        # answered: the slot is free before the client can see the answer (Kafka's request
        # queue, too, holds a request only until a handler has taken it)
        slot.release()
        if isinstance(response, FetchFrame):
            try:
                await self._send_fetch(response)
            finally:
                response.close()
        elif response is not None:
            self.transport.write(response)
            await self._drain()

    async def _drain(self) -> None:
        if self.closed:
            raise ConnectionError("connection closed")
        if self.writing_paused:
            self._drained = self.loop.create_future()
            await self._drained

    async def _send_fetch(self, frame: FetchFrame) -> None:
        """The frame's bytes, and each slice straight from its file (``os.sendfile`` on a
        plain socket; asyncio falls back to read-and-write where it cannot, as under TLS)."""
        transport = self.transport
        assert transport is not None
        for part in frame.parts:
            if not isinstance(part, OpenSlice):
                transport.write(part)
                continue
            sent = self._send_file_now(transport, part)
            if sent == part.size:
                continue
            await self._drain()
            self.sending_file = True
            try:
                with open(part.fd, "rb", buffering=0, closefd=False) as file:
                    sent += await self.loop.sendfile(
                        transport, file, part.position + sent, part.size - sent
                    )
            finally:
                self.sending_file = False
            if sent != part.size:  # the file was cut under us: the frame cannot be finished
                raise ConnectionError(f"sent {sent} of {part.size} fetched bytes")
        await self._drain()
        self.reading_paused = not transport.is_reading()
        self.update_reading()

    def _send_file_now(self, transport: asyncio.Transport, part: OpenSlice) -> int:
        """As much of ``part`` as the socket takes now, sent with ``os.sendfile`` straight
        from the segment, when nothing is queued ahead of it on a plain socket (the common
        fetch: the response header went out at once and the socket has room). The rest goes
        through ``loop.sendfile``, which waits for room; doing the first write here saves it a
        pause and resume of reading and three loop turns per fetch."""
        sock = transport.get_extra_info("socket")
        if (
            sock is None
            or transport.get_write_buffer_size()
            or transport.get_extra_info("sslcontext") is not None
        ):
            return 0
        sent = 0
        try:
            while sent < part.size:
                n = os.sendfile(sock.fileno(), part.fd, part.position + sent, part.size - sent)
                if n == 0:  # the file ends early: loop.sendfile finds that out and says so
                    break
                sent += n
        except (BlockingIOError, InterruptedError):
            pass  # the socket is full: loop.sendfile waits for room
        except ConnectionError:
            raise
        except OSError:  # a file or socket sendfile does not take: asyncio's fallback
            pass
        if sent:
            self.last_active = self.loop.time()
        return sent

    # --- closing --------------------------------------------------------------------------------

    async def _watch_idle(self) -> None:
        """Close the connection once no bytes have moved either way for
        ``connections.max.idle.ms`` -- a half-sent frame's too (Kafka's Selector)."""
        idle_s = self.settings.connections_max_idle_ms / 1000
        while (remaining := self.last_active + idle_s - self.loop.time()) > 0:
            await asyncio.sleep(remaining)
        logger.debug("closing connection from %s: idle for connections.max.idle.ms", self.address)
        self._fail(None)

    def _fail(self, why: str | None) -> None:
        self._send_unsent()  # the answers before the failing request, as Kafka sends them
        if why is not None:
            logger.warning("%s", why)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True

    def abort(self) -> None:
        """Drop the connection now (the server is stopping)."""
        if self.transport is not None:
            self.transport.abort()

    async def finished(self) -> None:
        """Wait until the answering task has stopped."""
        tasks = [t for t in (self.task, self._watch) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)


class _Slot:
    """A frame's share of queued.max.requests, given back once: when it is answered, or as
    soon as it parks to wait for data (Kafka's fetch purgatory holds no request-queue slot,
    so a thousand long polls cannot shut out a new client)."""

    def __init__(self, release_slot: Callable[[], None]) -> None:
        self._release_slot: Callable[[], None] | None = release_slot

    def release(self) -> None:
        if self._release_slot is not None:
            self._release_slot()
            self._release_slot = None


def _address(name: object) -> str:
    """host:port of a socket name (Kafka's connection ids are local-remote-index)."""
    if isinstance(name, tuple) and len(name) >= 2:
        return f"{name[0]}:{name[1]}"
    return ""
