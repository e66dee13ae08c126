"""Kafka's request and response framing, sans-IO: bytes in, request objects out; response
objects in, bytes out (Kafka's NetworkReceive, RequestHeader, RequestContext.parseRequest).

Why: the transport and the tests feed the same bytes through one codec, so every framing rule
(size prefix, header versions, the ApiVersions exceptions) is tested without a socket. The
message bodies are kio's, generated from Kafka's JSON schemas; nothing here hand-writes a field
(the Produce response, the one hot answer, is written by ``produce_response`` to kio's bytes).

Refuses: a frame larger than ``socket.request.max.bytes`` or with a negative size (Kafka's
InvalidReceiveException closes the connection), and any request it cannot parse
(``InvalidRequestError``; Kafka closes the connection then too). The one request it answers
without parsing is an ApiVersions request of a version it does not know (KIP-511). Bytes left
after a request's last field are ignored, as Kafka's parser ignores them: librdkafka's
Metadata v12 request for all topics (``AdminClient.list_topics()``) carries three.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import pkgutil
import struct
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32

from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.frame_guard import check_frame
from kafkalog.protocol.metadata_response import encode_metadata_body
from kafkalog.protocol.produce_response import encode_produce_response

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")  # the fields every header version starts with


class InvalidRequestError(KafkaLogError):
    """A frame or request the broker cannot take; the connection is closed (Kafka's
    InvalidRequestException / InvalidReceiveException)."""


ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"  # a client that did not authenticate (KafkaPrincipal)


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request: its header fields and its kio body (None for an ApiVersions request
    of an unknown version, answered from the header alone)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    # the listener it came in through (Kafka's RequestContext.listenerName); empty when it
    # was parsed outside a connection
    listener: str = ""
    # who sent it and from where (RequestContext.principal and clientAddress), for the ACLs
    principal: str = ANONYMOUS_PRINCIPAL
    client_host: str = ""
    connection_id: str = ""  # the connection's id (share sessions are tied to it)


class FrameReader:
    """Cuts a byte stream into request frames (Kafka's NetworkReceive): a 4-byte size, then the
    request. Holds at most one partial frame."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def has_frame(self) -> bool:
        """Whether a whole frame (or a size no frame may have) waits to be cut."""
        if len(self._buffer) < 4:
            return False
        (size,) = _SIZE.unpack_from(self._buffer)
        return not 0 <= size <= self.max_size or len(self._buffer) >= 4 + size

    def next_frame(self) -> bytes | None:
        """The next whole frame without its size, or None if more bytes are needed."""
        if len(self._buffer) < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buffer)
        if size < 0 or size > self.max_size:
            raise InvalidRequestError(
                f"a request of {size} bytes is larger than socket.request.max.bytes "
                f"({self.max_size})"
                if size > 0
                else f"a request frame has the negative size {size}"
            )
        if len(self._buffer) < 4 + size:
            return None
        with memoryview(self._buffer) as view:
            frame = bytes(view[4 : 4 + size])  # one copy, not a bytearray slice and another
        del self._buffer[: 4 + size]
        return frame


@cache
def payload_module(api_key: int, version: int, response: bool) -> ModuleType:
    if response:
        return load_payload_module(api_key, version, EntityType.response)
    return load_payload_module(api_key, version, EntityType.request)


@cache
def _entity(api_key: int, version: int, response: bool) -> type[Any]:
    module = payload_module(api_key, version, response)
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) in (
            EntityType.request,
            EntityType.response,
        ):
            return value
    raise InvalidRequestError(f"no message type for API {api_key} version {version}")


@cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@cache
def _fields_of_any_version(module_name: str, class_name: str) -> frozenset[str]:
    """The fields ``class_name`` has in some version of the message ``module_name`` is one
    version of (``kio.schema.<api>.v<N>.<request|response>``)."""
    package_name, _, rest = module_name.rpartition(".v")
    kind = rest.partition(".")[2]
    package = importlib.import_module(package_name)
    names: set[str] = set()
    for info in pkgutil.iter_modules(package.__path__):
        try:
            module = importlib.import_module(f"{package_name}.{info.name}.{kind}")
        except ImportError:
            continue
        cls = getattr(module, class_name, None)
        if cls is not None:
            names |= _field_names(cls)
    return frozenset(names)


def make(module: ModuleType, class_name: str, /, **values: Any) -> Any:
    """An instance of ``module.name`` from the fields this version has: a field a version
    lacks is left out, so one handler builds every version's response. A field no version
    has is a mistake (a misspelt name would be dropped silently): TypeError."""
    cls = getattr(module, class_name)
    names = _field_names(cls)
    if names.issuperset(values):  # every field this version has: the common case
        return cls(**values)
    unknown = [k for k in values if k not in names]
    if unknown:
        known = _fields_of_any_version(module.__name__, class_name)
        wrong = [k for k in unknown if k not in known]
        if wrong:
            raise TypeError(f"{class_name} has no field {', '.join(wrong)} in any version")
    return cls(**{k: v for k, v in values.items() if k in names})


def is_flexible(api_key: int, version: int) -> bool:
    return bool(_entity(api_key, version, False).__flexible__)


def decode_request(
    frame: bytes,
    supported: dict[int, tuple[int, int]],
    listener: str = "",
    principal: str = ANONYMOUS_PRINCIPAL,
    client_host: str = "",
    connection_id: str = "",
) -> Request:
    """Parse one frame that came in through ``listener`` from ``principal`` at ``client_host``;
    ``supported`` maps API keys to the (min, max) versions served."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise InvalidRequestError(f"a request frame of {len(frame)} bytes has no header")
    api_key, version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame)
    span = supported.get(api_key)
    if span is None:
        raise InvalidRequestError(f"unknown or unsupported API key {api_key}")
    if not span[0] <= version <= span[1]:
        if api_key == ApiKey.API_VERSIONS:
            return Request(
                api_key, version, correlation_id, None, None, listener, principal, client_host
            )
        raise InvalidRequestError(
            f"API key {api_key} version {version} is not supported (versions {span[0]}-{span[1]})"
        )
    header_type = RequestHeaderV2 if is_flexible(api_key, version) else RequestHeaderV1
    try:
        header, used = entity_reader(header_type)(frame, 0)
        entity = _entity(api_key, version, False)
        check_frame(entity, frame, used)  # before kio: see frame_guard
        body, _ = entity_reader(entity)(frame, used)  # the rest of the frame: see above
    except Exception as err:  # kio raises its own and struct/Unicode errors on bad bytes
        raise InvalidRequestError(
            f"cannot parse API key {api_key} version {version} (correlation id "
            f"{correlation_id}): {err}"
        ) from err
    client_id: str | None = getattr(header, "client_id", None)
    return Request(
        api_key, version, correlation_id, client_id, body, listener, principal, client_host,
        connection_id,
    )  # fmt: skip


def encode_response(request: Request, body: Any) -> bytes:
    """The size-prefixed response frame for ``request``. ApiVersions responses always use
    header version 0, so that a client can read one before it knows the broker's versions."""
    if request.api_key == ApiKey.PRODUCE:  # the hot path's answer, written by hand
        written = encode_produce_response(request.api_version, request.correlation_id, body)
        if written is not None:
            return written
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    flexible = request.api_key != ApiKey.API_VERSIONS and is_flexible(
        request.api_key, request.api_version
    )
    if flexible:
        entity_writer(ResponseHeaderV1)(
            out, ResponseHeaderV1(correlation_id=i32(request.correlation_id))
        )
    else:
        entity_writer(ResponseHeaderV0)(
            out, ResponseHeaderV0(correlation_id=i32(request.correlation_id))
        )
    if request.api_key == ApiKey.METADATA:
        out.write(encode_metadata_body(body))
    else:
        entity_writer(type(body))(out, body)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


# (name, lowest, highest) supported; (name, level) finalized; the finalized epoch
Features = tuple[tuple[tuple[str, int, int], ...], tuple[tuple[str, int], ...], int]


def api_versions_body(
    version: int,
    code: ErrorCode,
    supported: dict[int, tuple[int, int]],
    features: Features | None = None,
    **extra: Any,
) -> Any:
    """An ApiVersionsResponse of ``version`` listing ``supported``, and from version 3 the
    broker's ``features``: (name, lowest, highest) supported, (name, level) finalized, and the
    finalized features' epoch."""
    module = payload_module(ApiKey.API_VERSIONS, version, True)
    if features is not None and version >= 3:
        supported_features, finalized, epoch = features
        extra = {
            **extra,
            "supported_features": tuple(
                make(module, "SupportedFeatureKey", name=n, min_version=lo, max_version=hi)
                for n, lo, hi in supported_features
            ),
            "finalized_features_epoch": epoch,
            "finalized_features": tuple(
                make(
                    module,
                    "FinalizedFeatureKey",
                    name=n,
                    max_version_level=level,
                    min_version_level=level,
                )
                for n, level in finalized
            ),
        }
    return make(
        module,
        "ApiVersionsResponse",
        error_code=code,
        api_keys=tuple(
            make(module, "ApiVersion", api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(supported.items())
        ),
        **extra,
    )


def unsupported_api_versions(request: Request, supported: dict[int, tuple[int, int]]) -> bytes:
    """Kafka's answer to an ApiVersions request of a version it does not know: a version 0
    response with UNSUPPORTED_VERSION and the versions it does, so the client retries lower."""
    body = api_versions_body(0, ErrorCode.unsupported_version, supported)
    return encode_response(
        Request(ApiKey.API_VERSIONS, 0, request.correlation_id, request.client_id, None), body
    )
