"""SCRAM credentials of ``kafkalog serve``: salt, stored key, server key and iterations per user
and mechanism, never the password (RFC 5802, as Kafka's ScramCredential keeps them).

Why: SCRAM's server side needs what Kafka keeps in its metadata log (UserScramCredentialRecord);
kafkalog has no metadata log, so the credentials are a JSON file, ``kafkalog-scram-credentials``,
in the first log directory, replaced atomically. ``kafkalog serve --add-scram`` takes Kafka's
``kafka-storage format --add-scram`` syntax: ``SCRAM-SHA-256=[name=alice,password=secret]``,
with ``iterations=`` optional (Kafka's default 4096, at least 4096 as Kafka requires).

Refuses: a damaged file (the server does not start: an empty store would lock everyone out
silently), unknown mechanisms, and iterations outside Kafka's 4096..16384.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from pathlib import Path

from scramp import ScramMechanism

from kafkalog.errors import CorruptCheckpointError, InvalidArgumentError
from kafkalog.storage.atomic import read_json, write_atomically

FILE_NAME = "kafkalog-scram-credentials"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS, MIN_ITERATIONS, MAX_ITERATIONS = 4096, 4096, 16384
_ADD_SCRAM = re.compile(r"^\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[(.*)\]\s*$")


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


Credentials = dict[tuple[str, str], ScramCredential]  # (mechanism, user) -> credential


def _encode(cred: ScramCredential) -> dict[str, object]:
    b64 = base64.b64encode
    return {
        "salt": b64(cred.salt).decode(),
        "stored_key": b64(cred.stored_key).decode(),
        "server_key": b64(cred.server_key).decode(),
        "iterations": cred.iterations,
    }


def load_credentials(log_dir: Path) -> Credentials:
    path = log_dir / FILE_NAME
    raw = read_json(path, "SCRAM credentials")
    if raw is None:
        return {}
    out: Credentials = {}
    try:
        for mechanism, users in raw.items():
            for user, c in users.items():
                out[(mechanism, user)] = ScramCredential(
                    base64.b64decode(c["salt"]),
                    base64.b64decode(c["stored_key"]),
                    base64.b64decode(c["server_key"]),
                    int(c["iterations"]),
                )
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise CorruptCheckpointError(f"SCRAM credentials {path} are damaged: {err}") from err
    return out


def save_credentials(log_dir: Path, credentials: Credentials) -> None:
    raw: dict[str, dict[str, object]] = {}
    for (mechanism, user), cred in sorted(credentials.items()):
        raw.setdefault(mechanism, {})[user] = _encode(cred)
    write_atomically(log_dir / FILE_NAME, json.dumps(raw, indent=1).encode())


def make_credential(mechanism: str, password: str, iterations: int) -> ScramCredential:
    if mechanism not in MECHANISMS:
        raise InvalidArgumentError(f"{mechanism!r} is not one of {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidArgumentError(
            f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}"
        )
    salt, stored, server, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    return ScramCredential(salt, stored, server, count)


def parse_add_scram(text: str) -> tuple[str, str, ScramCredential]:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret]`` -> (mechanism, user, credential)."""
    match = _ADD_SCRAM.match(text)
    if match is None:
        raise InvalidArgumentError(
            f"{text!r} is not SCRAM-SHA-256=[name=<user>,password=<password>] (or SCRAM-SHA-512)"
        )
    fields: dict[str, str] = {}
    for item in match.group(2).split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"{item!r} in {text!r} is not key=value")
        fields[key.strip()] = value.strip().strip('"')
    if not fields.get("name") or "password" not in fields:
        raise InvalidArgumentError(f"{text!r} needs name= and password=")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError as err:
        raise InvalidArgumentError(f"iterations in {text!r} is not a number") from err
    mechanism = match.group(1)
    return mechanism, fields["name"], make_credential(mechanism, fields["password"], iterations)
