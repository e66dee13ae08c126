"""Fetch sessions (KIP-227, Kafka's FetchSession and FetchSessionCache).

Why: a consumer of many partitions would name every one of them in every Fetch, and get every
one back, each time. With a session, the broker keeps the partitions and what it last told the
client about each; the client names only the partitions whose fetch position changed, and the
answer holds only the partitions that have records, a new high watermark or log start offset,
or an error. A Fetch of version 7 or later asks for one: epoch 0 opens a session (a full
fetch, answered with its id), epoch n > 0 continues session ``session_id`` at its n-th request,
and epoch -1 closes it (a sessionless fetch). A session unknown to the cache is answered
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH, and the client starts
a new session with a full fetch, as with Kafka.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1,000).
When it is full, a new session takes the place of one unused for two minutes (Kafka's
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS), else of the smallest if the new one is larger,
else it is not kept and the fetch is answered as a sessionless one (session id 0).

Refuses: topic ids (Fetch v13+, which this broker does not serve) and follower sessions
(there are no followers). A session's state changes only once its answer is ready: a fetch
that waits in the purgatory changes nothing while it waits.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.fetch_frame import FetchResponseData, PartitionResponse, TopicResponse
from kafkalog.protocol.wire import Request, make, payload_module

INITIAL_EPOCH, FINAL_EPOCH, INVALID_SESSION_ID = 0, -1, 0
FIRST_SESSION_VERSION = 7
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS

Partition = tuple[str, int]


class _CachedPartition:
    """What the client last asked of a partition, and what it was last told of it."""

    __slots__ = ("high_watermark", "log_start_offset", "spec")

    def __init__(self, spec: Any) -> None:
        self.spec = spec  # the request's FetchPartition: offset, max bytes, log start
        self.high_watermark = -1
        self.log_start_offset = -1

    def must_respond(self, p: PartitionResponse) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: whether the partition goes into
        an incremental answer, remembering what it says."""
        respond = p.records_size > 0
        if p.high_watermark != self.high_watermark:
            self.high_watermark, respond = p.high_watermark, True
        if p.log_start_offset != self.log_start_offset:
            self.log_start_offset, respond = p.log_start_offset, True
        if p.error_code != ErrorCode.none.value:
            self.high_watermark, respond = -1, True  # sent again once the error is gone
        return respond


class FetchSession:
    """One client's session: its partitions in fetch order, and the epoch it expects next."""

    def __init__(self, session_id: int, partitions: dict[Partition, _CachedPartition]) -> None:
        self.id = session_id
        self.epoch = 1  # the epoch after INITIAL_EPOCH (Kafka's JFetchMetadata.nextEpoch)
        self.partitions = partitions
        self.last_used = 0.0

    @property
    def size(self) -> int:
        return len(self.partitions)


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1  # wraps past INITIAL and FINAL


class SessionContext:
    """How one Fetch relates to a session: which partitions to read (``request``) and what to
    make of the answer (``finish``, once, with the answer that will be sent)."""

    def __init__(
        self,
        cache: FetchSessionCache,
        request: Request,
        *,
        error: ErrorCode | None = None,
        session: FetchSession | None = None,
        create: bool = False,
    ) -> None:
        self.request = request
        self._cache, self._error, self._session, self._create = cache, error, session, create

    def throttled(self, ms: int) -> FetchResponseData:
        """A throttled fetch's empty answer (KIP-219): an incremental fetch's session goes
        on, unchanged by it, and a full fetch opens none (Kafka's getThrottledResponse)."""
        session = self._session if self._error is None else None
        return FetchResponseData(0, throttle_ms=ms, session_id=0 if session is None else session.id)

    def finish(self, response: FetchResponseData) -> FetchResponseData:
        if self._error is not None:
            response.close()
            return FetchResponseData(self._error.value)
        if self._create:
            return self._cache.created(self.request, response)
        if self._session is not None:
            return self._cache.incremental(self._session, response)
        return response


class FetchSessionCache:
    """The broker's fetch sessions. Thread-safe: tries run on the loop and on handler threads."""

    def __init__(
        self,
        slots: int,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.slots = slots
        self._clock = clock
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}  # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def begin(self, request: Request) -> SessionContext:
        """The context of ``request``: for an incremental fetch, a request that names every
        partition of the session, at the offsets the session keeps."""
        body = request.body
        if request.api_version < FIRST_SESSION_VERSION or body.replica_id >= 0:
            return SessionContext(self, request)
        session_id, epoch = body.session_id, body.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                with self._lock:
                    self._sessions.pop(session_id, None)  # a full fetch closes the one it names
            return SessionContext(self, request, create=epoch == INITIAL_EPOCH)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return self._failed(request, ErrorCode.fetch_session_id_not_found)
            if session.epoch != epoch:
                return self._failed(request, ErrorCode.invalid_fetch_session_epoch)
            for topic in body.topics:
                for spec in topic.partitions:
                    cached = session.partitions.get((topic.topic, spec.partition))
                    if cached is None:
                        session.partitions[(topic.topic, spec.partition)] = _CachedPartition(spec)
                    else:
                        cached.spec = spec
            for topic in body.forgotten_topics_data:
                for index in topic.partitions:
                    session.partitions.pop((topic.topic, index), None)
            if not session.partitions:  # nothing left to fetch: Kafka closes it too
                del self._sessions[session_id]
                return SessionContext(self, _with_partitions(request, {}))
            session.epoch = _next_epoch(session.epoch)
            self._touch(session)
            every = {key: cached.spec for key, cached in session.partitions.items()}
        return SessionContext(self, _with_partitions(request, every), session=session)

    def _failed(self, request: Request, code: ErrorCode) -> SessionContext:
        return SessionContext(self, _with_partitions(request, {}), error=code)

    def _touch(self, session: FetchSession) -> None:
        session.last_used = self._clock()
        self._sessions.pop(session.id, None)
        self._sessions[session.id] = session

    def created(self, request: Request, response: FetchResponseData) -> FetchResponseData:
        """A full fetch's answer: every partition, and the id of the session made of them if
        the cache has room for it (0 if not)."""
        partitions: dict[Partition, _CachedPartition] = {}
        for topic in request.body.topics:
            for spec in topic.partitions:
                partitions[(topic.topic, spec.partition)] = _CachedPartition(spec)
        for topic_response in response.topics:
            for p in topic_response.partitions:
                cached = partitions.get((topic_response.name, p.index))
                if cached is not None:
                    cached.must_respond(p)
        with self._lock:
            if not partitions or not self._room_for(len(partitions)):
                return response
            session_id = self._new_id()
            session = FetchSession(session_id, partitions)
            self._touch(session)
        response.session_id = session_id
        return response

    def _room_for(self, size: int) -> bool:
        """Under the lock: whether a session of ``size`` partitions may be kept, making room
        (Kafka's FetchSessionCache.tryEvict)."""
        if len(self._sessions) < self.slots:
            return True
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if (self._clock() - oldest.last_used) * 1000 > EVICTION_MS:
            del self._sessions[oldest.id]
            return True
        smallest = min(self._sessions.values(), key=lambda s: (s.size, s.id))
        if smallest.size < size:
            del self._sessions[smallest.id]
            return True
        return False

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, 2**31 - 1)
            if candidate not in self._sessions:
                return candidate

    def incremental(self, session: FetchSession, response: FetchResponseData) -> FetchResponseData:
        """An incremental fetch's answer: the partitions with something to say, each then
        moved to the end of the session's order so that the rest are read first next time
        (Kafka's IncrementalFetchContext)."""
        kept = FetchResponseData(response.error_code, session_id=session.id)
        with self._lock:
            for topic_response in response.topics:
                out = TopicResponse(topic_response.name)
                for p in topic_response.partitions:
                    key = (topic_response.name, p.index)
                    cached = session.partitions.get(key)
                    if cached is not None and not cached.must_respond(p):
                        if not isinstance(p.records, bytes):
                            p.records.close()
                        continue
                    out.partitions.append(p)
                    if cached is not None:
                        session.partitions[key] = session.partitions.pop(key)
                if out.partitions:
                    kept.topics.append(out)
        return kept


def _with_partitions(request: Request, partitions: dict[Partition, Any]) -> Request:
    """``request`` asking for ``partitions`` (topic order as first named), nothing forgotten."""
    mod = payload_module(ApiKey.FETCH, request.api_version, False)
    by_topic: dict[str, list[Any]] = {}
    for (topic, _), spec in partitions.items():
        by_topic.setdefault(topic, []).append(spec)
    topics = tuple(
        make(mod, "FetchTopic", topic=topic, partitions=tuple(specs))
        for topic, specs in by_topic.items()
    )
    body = dataclasses.replace(request.body, topics=topics, forgotten_topics_data=())
    return dataclasses.replace(request, body=body)
