"""One connection's SASL authentication: SaslHandshake, then SaslAuthenticate rounds (KIP-152),
for PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677; the exchange is scramp's).

Why: on a SASL listener nothing but ApiVersions, SaslHandshake and SaslAuthenticate is served
until the client has proved who it is, as Kafka's SaslServerAuthenticator does; a wrong
password is answered with SASL_AUTHENTICATION_FAILED and Kafka's message, and the connection is
then closed. Sans-IO: the transport feeds decoded requests and sends what comes back.

Refuses: SaslHandshake v0 (its raw, unframed tokens; every maintained client sends v1), a
second handshake, mechanisms the listener does not enable (UNSUPPORTED_SASL_MECHANISM with the
enabled list), and PLAIN's authorization id naming another user.
"""

from __future__ import annotations

import datetime
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from scramp import ScramException, ScramMechanism

from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.scram_store import Credentials
from kafkalog.server.security import ListenerSecurity

_NO_LIFETIME = datetime.timedelta(0)


@dataclass(slots=True)
class SaslOutcome:
    """A response body, and whether the connection is authenticated now or must be closed
    once the response is sent."""

    body: Any
    authenticated: bool = False
    close: bool = False


def illegal_state(request: Request) -> Any:
    """The answer to SaslHandshake or SaslAuthenticate on a listener without SASL (Kafka's
    ILLEGAL_SASL_STATE)."""
    mod = payload_module(request.api_key, request.api_version, True)
    if request.api_key == ApiKey.SASL_HANDSHAKE:
        return make(mod, "SaslHandshakeResponse", error_code=ErrorCode.illegal_sasl_state,
                    mechanisms=())  # fmt: skip
    return make(mod, "SaslAuthenticateResponse", error_code=ErrorCode.illegal_sasl_state,
                error_message="this listener does not use SASL", auth_bytes=b"",
                session_lifetime=_NO_LIFETIME)  # fmt: skip


class SaslSession:
    """The authentication state of one connection."""

    def __init__(self, security: ListenerSecurity, scram: Mapping[tuple[str, str], Any]) -> None:
        self.security = security
        self.scram: Credentials = dict(scram)
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram_server: Any = None
        self._scram_user: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may come now; any other closes the connection."""
        if self.authenticated:
            return api_key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
        if self.mechanism is None:
            return api_key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE)
        return api_key == ApiKey.SASL_AUTHENTICATE

    def handle(self, request: Request) -> SaslOutcome:
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(request)
        return self._authenticate(request)

    def _handshake(self, request: Request) -> SaslOutcome:
        mod = payload_module(ApiKey.SASL_HANDSHAKE, request.api_version, True)
        wanted = request.body.mechanism
        enabled = self.security.mechanisms
        if wanted not in enabled:
            code = ErrorCode.unsupported_sasl_mechanism
            body = make(mod, "SaslHandshakeResponse", error_code=code, mechanisms=enabled)
            return SaslOutcome(body, close=True)
        self.mechanism = wanted
        if wanted.startswith("SCRAM-"):
            self._scram_server = ScramMechanism(wanted).make_server(self._scram_lookup)
        body = make(mod, "SaslHandshakeResponse", error_code=ErrorCode.none, mechanisms=enabled)
        return SaslOutcome(body)

    def _scram_lookup(self, saslname: str) -> tuple[bytes, bytes, bytes, int]:
        user = saslname.replace("=2C", ",").replace("=3D", "=")  # RFC 5802's escapes
        self._scram_user = user
        cred = self.scram.get((self.mechanism or "", user))
        if cred is None:
            raise ScramException("unknown user")
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def _response(self, request: Request, code: ErrorCode, message: str | None,
                  auth: bytes) -> Any:  # fmt: skip
        mod = payload_module(ApiKey.SASL_AUTHENTICATE, request.api_version, True)
        return make(mod, "SaslAuthenticateResponse", error_code=code, error_message=message,
                    auth_bytes=auth, session_lifetime=_NO_LIFETIME)  # fmt: skip

    def _failed(self, request: Request, message: str) -> SaslOutcome:
        body = self._response(request, ErrorCode.sasl_authentication_failed, message, b"")
        return SaslOutcome(body, close=True)

    def _authenticate(self, request: Request) -> SaslOutcome:
        token = bytes(request.body.auth_bytes)
        if self.mechanism == "PLAIN":
            return self._plain(request, token)
        return self._scram(request, token)

    def _plain(self, request: Request, token: bytes) -> SaslOutcome:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            return self._failed(request, "Authentication failed: Invalid SASL/PLAIN response")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._failed(request, "Authentication failed: Invalid SASL/PLAIN response")
        expected = self.security.plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return self._failed(request, "Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            return self._failed(
                request, "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )  # fmt: skip
        self.principal = user
        return SaslOutcome(self._response(request, ErrorCode.none, None, b""), authenticated=True)

    def _scram(self, request: Request, token: bytes) -> SaslOutcome:
        server = self._scram_server
        failure = (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {self.mechanism}"
        )
        try:
            text = token.decode("utf-8")
            if server.stage is None:  # client-first
                server.set_client_first(text)
                reply = server.get_server_first()
                return SaslOutcome(self._response(request, ErrorCode.none, None, reply.encode()))
            server.set_client_final(text)
            reply = server.get_server_final()
        except (ScramException, UnicodeDecodeError, ValueError):
            return self._failed(request, failure)
        self.principal = self._scram_user
        body = self._response(request, ErrorCode.none, None, reply.encode())
        return SaslOutcome(body, authenticated=True)
