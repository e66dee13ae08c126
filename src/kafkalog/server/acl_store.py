"""The ACL bindings of ``kafkalog serve``, durable in ``kafkalog-acls`` in the first log
directory.

Why: Kafka keeps ACLs in its metadata log (AccessControlEntryRecord); kafkalog has none, so
they are a JSON file replaced atomically before a change is answered, which a Kafka broker
taking the directory over ignores (its LogManager loads directories only). A directory that a
KRaft broker kept, and that has no such file yet, starts with that broker's ACLs from its
metadata log, so an ACL set on Kafka keeps protecting the data; the first change writes them
all to the file, which is the truth from then on.

Refuses: a damaged file (the server does not start: starting with no ACLs would open every
resource, or lock everyone out, silently), and bindings Kafka would refuse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kafkalog.errors import CorruptCheckpointError
from kafkalog.server.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    invalid_binding,
)
from kafkalog.storage.atomic import read_json, write_atomically

logger = logging.getLogger("kafkalog.server")

FILE_NAME = "kafkalog-acls"
_FIELDS = (
    "resourceType", "resourceName", "patternType", "principal", "host", "operation",
    "permissionType",
)  # fmt: skip


def binding_of(fields: Mapping[str, Any]) -> AclBinding:
    """An AclBinding from Kafka's AccessControlEntryRecord field names and codes; ValueError
    (or KeyError, TypeError) for one that is not a valid binding."""
    acl = AclBinding(
        ResourceType(int(fields["resourceType"])),
        str(fields["resourceName"]),
        PatternType(int(fields["patternType"])),
        str(fields["principal"]),
        str(fields["host"]),
        AclOperation(int(fields["operation"])),
        AclPermissionType(int(fields["permissionType"])),
    )
    problem = invalid_binding(acl)
    if problem is not None:
        raise ValueError(problem)
    return acl


def _fields(acl: AclBinding) -> dict[str, Any]:
    values = (
        int(acl.resource_type), acl.resource_name, int(acl.pattern_type), acl.principal,
        acl.host, int(acl.operation), int(acl.permission),
    )  # fmt: skip
    return dict(zip(_FIELDS, values, strict=True))


def load_acls(log_dir: Path, kraft_acls: Iterable[Mapping[str, Any]] = ()) -> list[AclBinding]:
    """The bindings kept in ``log_dir``; without a file, those of a KRaft broker's metadata log
    (``kraft_acls``, each one kafkalog cannot take named in a warning and left out)."""
    path = log_dir / FILE_NAME
    raw = read_json(path, "ACLs")
    if raw is None:
        return _from_kraft(kraft_acls)
    try:
        if not isinstance(raw, dict) or not isinstance(raw.get("acls"), list):
            raise ValueError('not {"acls": [...]}')
        return [binding_of(fields) for fields in raw["acls"]]
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptCheckpointError(f"ACLs {path} are damaged: {err}") from err


def _from_kraft(kraft_acls: Iterable[Mapping[str, Any]]) -> list[AclBinding]:
    acls = []
    for fields in kraft_acls:
        try:
            acls.append(binding_of(fields))
        except (KeyError, TypeError, ValueError) as err:
            logger.warning("leaving out an ACL of the metadata log (%s): %s", dict(fields), err)
    if acls:
        logger.info("%d ACLs from the KRaft metadata log are in force", len(acls))
    return acls


def save_acls(log_dir: Path, acls: Iterable[AclBinding]) -> None:
    """Replace the file with ``acls``, durable when this returns."""
    body = {"version": 1, "acls": [_fields(acl) for acl in sorted(acls)]}
    write_atomically(log_dir / FILE_NAME, json.dumps(body, indent=1).encode())
