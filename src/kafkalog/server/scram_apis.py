"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): the SCRAM users of
``kafka-configs --entity-type users --alter --add-config SCRAM-SHA-256=[...]`` and the Admin
APIs, kept where ``kafkalog serve --add-scram`` keeps them.

Why: a broker's users are managed through the broker, with the client salting the password
(the server never sees it): an upsertion carries the salt, the salted password and the
iteration count, and the server keeps the stored and server keys Kafka's ScramFormatter
derives from them. A change is durable in the first log directory before it is answered and
applies to connections made from then on. Refuses, with Kafka's per-user codes: an unknown
mechanism, iterations outside 4096-16384, an empty user name, a user altered twice in one
request, the deletion or description of a credential that does not exist; and a principal
without DESCRIBE (ALTER) on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.scram_store import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    load_credentials,
    save_credentials,
)

# ScramMechanism's wire ids
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
_NOT_FOUND = "Attempt to {} a user credential that does not exist"
_ALTERING = threading.Lock()  # one read-modify-write of the credentials file at a time


def _credential(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """Kafka's ScramFormatter: stored key H(HMAC(salted, "Client Key")), server key
    HMAC(salted, "Server Key")."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return ScramCredential(salt, digest(client_key).digest(), server_key, iterations)


def handle_describe_user_scram_credentials(ctx: BrokerContext, request: Request) -> Any:
    mod = payload_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version, True)
    if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return make(
            mod, "DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed, error_message=None, results=(),
        )  # fmt: skip
    stored = load_credentials(ctx.manager.log_dirs[0])
    users: dict[str, list[tuple[int, int]]] = {}
    ids = {name: key for key, name in MECHANISM_IDS.items()}
    for (mechanism, user), cred in sorted(stored.items()):
        users.setdefault(user, []).append((ids[mechanism], cred.iterations))
    asked = [u.name for u in request.body.users] if request.body.users else sorted(users)
    results = []
    for name in dict.fromkeys(asked):
        code, message = ErrorCode.none, None
        if asked.count(name) > 1:
            code = ErrorCode.duplicate_resource
            message = (
                "Cannot describe SCRAM credentials for the same user twice in a single request"
            )
        elif name not in users:
            code, message = ErrorCode.resource_not_found, _NOT_FOUND.format("describe")
        infos = tuple(
            make(mod, "CredentialInfo", mechanism=m, iterations=i)
            for m, i in (users[name] if code is ErrorCode.none else ())
        )
        results.append(
            make(
                mod,
                "DescribeUserScramCredentialsResult",
                user=name,
                error_code=code,
                error_message=message,
                credential_infos=infos,
            )
        )
    return make(
        mod,
        "DescribeUserScramCredentialsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


def handle_alter_user_scram_credentials(ctx: BrokerContext, request: Request) -> Any:
    if not ctx.allowed(request, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        body = request.body
        refused = (ErrorCode.cluster_authorization_failed, None)
        return _altered(request, {i.name: refused for i in (*body.deletions, *body.upsertions)})
    with _ALTERING:
        return _alter(ctx, request)


def _alter(ctx: BrokerContext, request: Request) -> Any:
    body = request.body
    log_dir = ctx.manager.log_dirs[0]
    stored = load_credentials(log_dir)
    errors: dict[str, tuple[ErrorCode, str | None]] = {}  # the first refusal of each user
    seen: dict[tuple[str, int], int] = {}
    for item in (*body.deletions, *body.upsertions):
        seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1
    changed = dict(stored)

    def problem(item: Any, mechanism: str | None) -> tuple[ErrorCode, str] | None:
        """What is wrong with a deletion or upsertion whatever it asks (ScramControlManager)."""
        if not item.name:
            return ErrorCode.unacceptable_credential, "Username must not be empty"
        if mechanism is None:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if seen[(item.name, item.mechanism)] > 1:
            return ErrorCode.duplicate_resource, _TWICE
        return None

    for item in body.deletions:
        mechanism = MECHANISM_IDS.get(item.mechanism)
        wrong = problem(item, mechanism)
        if wrong is None and (mechanism, item.name) not in stored:
            wrong = ErrorCode.resource_not_found, _NOT_FOUND.format("delete")
        if wrong is not None:
            errors.setdefault(item.name, wrong)
        else:
            changed.pop((str(mechanism), item.name), None)
    for item in body.upsertions:
        mechanism = MECHANISM_IDS.get(item.mechanism)
        wrong = problem(item, mechanism)
        if wrong is None and not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            few = item.iterations < MIN_ITERATIONS
            wrong = ErrorCode.unacceptable_credential, f"Too {'few' if few else 'many'} iterations"
        if wrong is not None:
            errors.setdefault(item.name, wrong)
        else:
            salted = bytes(item.salted_password)
            changed[(str(mechanism), item.name)] = _credential(
                str(mechanism), bytes(item.salt), salted, item.iterations
            )
    # a user with any refused change keeps every credential it had, as Kafka applies per user
    changed = {k: v for k, v in changed.items() if k[1] not in errors}
    changed.update((k, v) for k, v in stored.items() if k[1] in errors)
    if changed != stored:
        save_credentials(log_dir, changed)  # durable before anyone is told
        ctx.scram_credentials = changed  # connections made from now on
    return _altered(request, errors)


def _altered(request: Request, errors: dict[str, tuple[ErrorCode, str | None]]) -> Any:
    """The answer: each user of the request once, with its first refusal if it had one."""
    mod = payload_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.api_version, True)
    body = request.body
    users = dict.fromkeys(item.name for item in (*body.deletions, *body.upsertions))
    results = tuple(
        make(
            mod,
            "AlterUserScramCredentialsResult",
            user=user,
            error_code=errors.get(user, (ErrorCode.none, None))[0],
            error_message=errors.get(user, (ErrorCode.none, None))[1],
        )
        for user in users
    )
    return make(
        mod, "AlterUserScramCredentialsResponse", throttle_time=NO_THROTTLE, results=results
    )


_TWICE = "A user credential cannot be altered twice in the same request"
_DESCRIBED_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request"
