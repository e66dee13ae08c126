"""Client quotas, as Kafka's ClientQuotaManager keeps and enforces them: ``producer_byte_rate``,
``consumer_byte_rate`` and ``request_percentage`` for users, client ids, both, and their
defaults, measured over ``quota.window.num`` samples of ``quota.window.size.seconds``.

Why: one client of a shared broker must not starve the others. A request that takes its
client over its quota is answered, with the ``throttle_time_ms`` it must wait (the time the
rate needs to fall back to the quota), and the connection is muted that long (KIP-219). A
client's quota is the first configured in Kafka's order (DefaultQuotaCallback): user and
client id, user and the default client, user; the default user with the client id, with the
default client, alone; the client id; the default client. Clients that share the matched
entity share one rate (all of alice's clients under a ``user=alice`` quota).

The values are kept in ``kafkalog-client-quotas`` in the first log directory, replaced
atomically before a change is answered; a directory a KRaft broker kept starts with that
broker's quotas (ClientQuotaRecord). Refuses: a damaged file (the server does not start),
keys, values and entities Kafka's ClientQuotaControlManager refuses, and IP entities
(``connection_creation_rate``): kafkalog keeps ``max.connections.per.ip`` only.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog.errors import CorruptCheckpointError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.storage.atomic import read_json, write_atomically

if TYPE_CHECKING:
    from kafkalog.protocol.wire import Request
    from kafkalog.server.context import BrokerContext

logger = logging.getLogger("kafkalog.server")

FILE_NAME = "kafkalog-client-quotas"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# QuotaConfig.userAndClientQuotaConfigs: the keys and whether their values are whole numbers
QUOTA_KEYS = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    "controller_mutation_rate": False,
}
RATES_BEFORE_A_SWEEP = 10_000  # rates kept before idle ones are forgotten
# an entity: its (entity type, name) pairs sorted by type; a None name is the type's default
Entity = tuple[tuple[str, str | None], ...]
_D = None  # the default name


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs))


def _candidates(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """The entities to look for, in order, each with the key of the rate it would govern."""
    u, c = user, client_id
    return [
        (entity_of([(CLIENT_ID, c), (USER, u)]), (u, c)),
        (entity_of([(CLIENT_ID, _D), (USER, u)]), (u, c)),
        (entity_of([(USER, u)]), (u, "")),
        (entity_of([(CLIENT_ID, c), (USER, _D)]), (u, c)),
        (entity_of([(CLIENT_ID, _D), (USER, _D)]), (u, c)),
        (entity_of([(USER, _D)]), (u, "")),
        (entity_of([(CLIENT_ID, c)]), ("", c)),
        (entity_of([(CLIENT_ID, _D)]), ("", c)),
    ]


def invalid_entity(entity: Entity) -> str | None:
    """Why Kafka refuses this entity (ClientQuotaControlManager.validateEntity), or None."""
    if not entity:
        return "Invalid empty client quota entity"
    kinds = [kind for kind, _ in entity]
    if len(set(kinds)) != len(kinds):
        return f"Invalid client quota entity, duplicate entity entry {kinds[0]}"
    for kind, name in entity:
        if kind not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {kind}"
        if name is not None and not name:
            return f"Empty {kind} not supported"
    if IP in kinds:
        return (
            "kafkalog serve keeps no IP quotas (connection_creation_rate); "
            "max.connections.per.ip limits an address"
        )
    return None


def invalid_value(key: str, value: float) -> str | None:
    """Why Kafka refuses this quota value (validateQuotaKeyValue), or None."""
    if key not in QUOTA_KEYS:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if QUOTA_KEYS[key] and (abs(value % 1.0) > 1e-6 or value > 2**63 - 1):
        return f"{key} cannot be a fractional value."
    return None


def load_quotas(
    log_dir: Path, kraft_quotas: Mapping[Entity, Mapping[str, float]] = {}
) -> dict[Entity, dict[str, float]]:
    """The quotas kept in ``log_dir``; without a file, a KRaft broker's (each one kafkalog
    cannot take named in a warning and left out)."""
    path = log_dir / FILE_NAME
    raw = read_json(path, "client quotas")
    if raw is None:
        return _from_kraft(kraft_quotas)
    out: dict[Entity, dict[str, float]] = {}
    try:
        for entry in raw["quotas"]:
            entity = entity_of((str(k), None if v is None else str(v)) for k, v in entry["entity"])
            values = {str(k): float(v) for k, v in entry["values"].items()}
            problem = invalid_entity(entity) or next(
                filter(None, (invalid_value(k, v) for k, v in values.items())), None
            )
            if problem is not None:
                raise ValueError(problem)
            out[entity] = values
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CorruptCheckpointError(f"client quotas {path} are damaged: {err}") from err
    return out


def _from_kraft(kraft: Mapping[Entity, Mapping[str, float]]) -> dict[Entity, dict[str, float]]:
    out: dict[Entity, dict[str, float]] = {}
    for entity, values in kraft.items():
        problem = invalid_entity(entity)
        for key, value in values.items():
            wrong = problem or invalid_value(key, value)
            if wrong is not None:
                logger.warning("leaving out quota %s=%s of %s from the metadata log: %s",
                               key, value, dict(entity), wrong)  # fmt: skip
                continue
            out.setdefault(entity, {})[key] = value
    return out


def save_quotas(log_dir: Path, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
    body = {
        "version": 1,
        "quotas": [
            {"entity": [list(pair) for pair in entity], "values": dict(sorted(values.items()))}
            for entity, values in sorted(quotas.items(), key=lambda item: repr(item[0]))
            if values
        ],
    }
    write_atomically(log_dir / FILE_NAME, json.dumps(body, indent=1).encode())


@dataclass
class _Rate:
    """Kafka's Rate over a SampledStat: ``samples`` windows of ``window_ms``; the rate is the
    retained total over the elapsed time, counted as at least ``samples - 1`` whole windows
    (Rate.windowSize), per second."""

    samples: int
    window_ms: int
    _windows: list[list[float]] = field(default_factory=list)  # [start ms, total]

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        self._windows = [w for w in self._windows if now_ms - w[0] < expire]

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._windows or now_ms - self._windows[-1][0] >= self.window_ms:
            self._windows.append([float(now_ms), 0.0])
            del self._windows[: -self.samples]
        self._windows[-1][1] += value

    @property
    def last_ms(self) -> float:
        """When its newest sample started (never recorded: minus infinity)."""
        return self._windows[-1][0] if self._windows else float("-inf")

    def window_size_ms(self, now_ms: int) -> float:
        self._purge(now_ms)
        oldest = min((w[0] for w in self._windows), default=float(now_ms))
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def per_second(self, now_ms: int) -> float:
        total = sum(w[1] for w in self._windows)
        return total / (self.window_size_ms(now_ms) / 1000)


class QuotaManager:
    """The configured quotas and each client's rates. Thread-safe: handlers record from the
    event loop and from request handler threads."""

    def __init__(
        self,
        quotas: Mapping[Entity, Mapping[str, float]] = {},
        *,
        samples: int = 11,
        window_seconds: int = 1,
    ) -> None:
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self._lock = threading.Lock()
        self._quotas: dict[Entity, dict[str, float]] = {e: dict(v) for e, v in quotas.items()}
        self._rates: dict[tuple[str, str, str], _Rate] = {}  # (key, user, client id) -> rate
        self._sweep_at = RATES_BEFORE_A_SWEEP

    @property
    def lock(self) -> threading.Lock:
        """Held by whoever changes the quotas (and makes the change durable first)."""
        return self._lock

    def quotas(self) -> dict[Entity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def replace(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """The quotas from now on (the caller holds ``lock`` and saved them first); the rates
        start again, as Kafka's sensors do when a quota's entity changes."""
        self._quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._rates.clear()

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def limit(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """The quota on ``key`` for the client, and the key of the rate it shares, or None."""
        for entity, rate_key in _candidates(user, client_id):
            value = self._quotas.get(entity, {}).get(key)
            if value is not None:
                return value, rate_key
        return None

    def record(
        self, key: str, principal: str, client_id: str | None, value: float, now_ms: int
    ) -> int:
        """Record ``value`` against the client's ``key`` quota; the throttle time in ms (0: under
        its quota, or none applies) -- Kafka's QuotaUtils.throttleTime."""
        if not self._quotas:
            return 0
        user = principal.partition(":")[2]
        with self._lock:
            found = self.limit(key, user, client_id or "")
            if found is None:
                return 0
            bound, (rate_user, rate_client) = found
            rate = self._rates.get((key, rate_user, rate_client))
            if rate is None:
                if len(self._rates) >= self._sweep_at:
                    self._sweep(now_ms)
                rate = self._rates[(key, rate_user, rate_client)] = _Rate(
                    self.samples, self.window_ms
                )
            rate.record(value, now_ms)
            observed = rate.per_second(now_ms)
            if observed <= bound:
                return 0
            return round((observed - bound) / bound * rate.window_size_ms(now_ms))

    def _sweep(self, now_ms: int) -> None:
        """Forget the rates whose samples have all expired (Kafka expires an idle client's
        sensors too): a client inventing client ids cannot grow the table without bound."""
        expire = self.samples * self.window_ms
        self._rates = {k: r for k, r in self._rates.items() if r.last_ms > now_ms - expire}
        self._sweep_at = max(RATES_BEFORE_A_SWEEP, 2 * len(self._rates))

    @property
    def tracked(self) -> int:
        """Rates kept now (one per client the quotas keep apart)."""
        return len(self._rates)

    def unrecord(
        self, key: str, principal: str, client_id: str | None, value: float, now_ms: int
    ) -> None:
        """Take back a recorded value (a throttled fetch sends nothing, so it uses nothing)."""
        user = principal.partition(":")[2]
        with self._lock:
            found = self.limit(key, user, client_id or "")
            if found is not None:
                rate = self._rates.get((key, *found[1]))
                if rate is not None:
                    rate.record(-value, now_ms)


# never throttled: a client must always be able to learn versions and log in
_EXEMPT = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def throttle_request(ctx: BrokerContext, request: Request, size: int, spent_ns: int) -> int:
    """Record a request's handler time against ``request_percentage`` (a percentage of one
    thread, as ClientRequestQuotaManager counts it) and a Produce's bytes against
    ``producer_byte_rate``; the throttle time in ms the client is owed, 0 if none."""
    quotas = ctx.quotas
    if not quotas.enabled or request.api_key in _EXEMPT:
        return 0
    now = ctx.manager.clock.milliseconds()
    who, client = request.principal, request.client_id
    ms = quotas.record(REQUEST_PERCENTAGE, who, client, spent_ns * 100 / 1e9, now)
    if request.api_key == ApiKey.PRODUCE:
        ms = max(ms, quotas.record(PRODUCER_BYTE_RATE, who, client, size, now))
    return ms


def throttle_fetch(ctx: BrokerContext, request: Request, size: int, spent_ns: int) -> int:
    """A Fetch's share: its response bytes against ``consumer_byte_rate`` and its time against
    ``request_percentage``. A throttled fetch is answered empty (KIP-219), so its bytes are
    taken back off the rate, as Kafka's handleFetchRequest does."""
    quotas = ctx.quotas
    if not quotas.enabled:
        return 0
    now = ctx.manager.clock.milliseconds()
    who, client = request.principal, request.client_id
    ms = max(
        quotas.record(CONSUMER_BYTE_RATE, who, client, size, now),
        quotas.record(REQUEST_PERCENTAGE, who, client, spent_ns * 100 / 1e9, now),
    )
    if ms > 0:
        quotas.unrecord(CONSUMER_BYTE_RATE, who, client, size, now)
    return ms
