"""ACL and quota changes under faults and misuse: a full disk at the save answers Kafka's
storage error and leaves the old set in force (nothing half-applied); two threads changing ACLs
at once lose neither change; wrong settings stop the start naming the key; a request with
UNKNOWN elements closes only its own connection."""

from __future__ import annotations

import errno
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import InvalidConfigError
from kafkalog.protocol.wire import make
from kafkalog.server import acl_apis, quota_apis, serve
from kafkalog.server.acl_store import load_acls
from kafkalog.server.authorizer import StandardAuthorizer
from kafkalog.server.quotas import load_quotas
from kafkalog.storage.faults import storage_error
from server_helpers import as_request, broker_over, frame, read_frame, request_module

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

STORAGE_ERROR = 56


def _creation(principal: str, topic: str = "orders", resource_type: int = 2) -> Any:
    mod = request_module(30, 3)
    return make(mod, "AclCreation", resource_type=resource_type, resource_name=topic,
                resource_pattern_type=3, principal=principal, host="*", operation=3,
                permission_type=3)  # fmt: skip


def _create_acls(*creations: Any) -> Any:
    return as_request(30, 3, make(request_module(30, 3), "CreateAclsRequest",
                                  creations=creations))  # fmt: skip


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    broker, manager = broker_over(tmp_path)
    broker.context.authorizer = StandardAuthorizer(super_users=["User:ANONYMOUS"])
    yield broker
    manager.close()


def _full_disk(*args: object) -> None:
    raise storage_error(OSError(errno.ENOSPC, "No space left on device"), "writing")


def test_a_full_disk_at_the_acl_save_changes_nothing(
    broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acl_apis, "save_acls", _full_disk)
    answer = broker.handle(_create_acls(_creation("User:alice")))
    assert [r.error_code for r in answer.results] == [STORAGE_ERROR]
    assert broker.context.authorizer.acls() == []  # not durable, so not in force
    monkeypatch.undo()
    answer = broker.handle(_create_acls(_creation("User:alice")))
    assert [r.error_code for r in answer.results] == [0]
    assert len(load_acls(tmp_path)) == 1


def test_a_full_disk_at_the_quota_save_changes_nothing(
    broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = request_module(49, 1)
    body = make(mod, "AlterClientQuotasRequest", validate_only=False, entries=(
        make(mod, "EntryData",
             entity=(make(mod, "EntityData", entity_type="user", entity_name="alice"),),
             ops=(make(mod, "OpData", key="producer_byte_rate", value=1024.0, remove=False),)),
    ))  # fmt: skip
    monkeypatch.setattr(quota_apis, "save_quotas", _full_disk)
    answer = broker.handle(as_request(49, 1, body))
    assert [e.error_code for e in answer.entries] == [STORAGE_ERROR]
    assert not broker.context.quotas.enabled
    monkeypatch.undo()
    answer = broker.handle(as_request(49, 1, body))
    assert [e.error_code for e in answer.entries] == [0]
    assert broker.context.quotas.enabled and load_quotas(tmp_path)


def test_two_threads_adding_acls_at_once_lose_neither(broker: Any, tmp_path: Path) -> None:
    def add(who: str) -> None:
        for i in range(40):
            broker.handle(_create_acls(_creation(f"User:{who}", f"t{i}")))

    threads = [threading.Thread(target=add, args=(who,)) for who in ("alice", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(broker.context.authorizer.acls()) == 80
    assert len(load_acls(tmp_path)) == 80  # what is in force is what is on disk


def test_wrong_security_settings_stop_the_start_naming_the_key(tmp_path: Path) -> None:
    wrong = [
        {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
        {"listeners": "SSL://127.0.0.1:0", "ssl.principal.mapping.rules": "RULE:^CN=(/bad"},
    ]
    for overrides in wrong:
        with pytest.raises(InvalidConfigError) as raised, serve(tmp_path, overrides=overrides):
            pass
        key = "authorizer.class.name" if "authorizer.class.name" in overrides else "ssl"
        assert key in str(raised.value)


def test_unknown_elements_close_only_their_own_connection(tmp_path: Path) -> None:
    overrides = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:ANONYMOUS"}  # fmt: skip
    with serve(tmp_path, overrides=overrides) as server:
        port = int(server.bootstrap_servers.rsplit(":", 1)[1])
        body = make(request_module(30, 3), "CreateAclsRequest",
                    creations=(_creation("User:alice", resource_type=99),))  # fmt: skip
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(frame(30, 3, body, 5))
            assert read_frame(sock) == b""  # closed unanswered, as Kafka's parser does
        good = make(request_module(30, 3), "CreateAclsRequest",
                    creations=(_creation("User:alice"),))  # fmt: skip
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(frame(30, 3, good, 6))
            assert read_frame(sock)  # the server serves on
        assert len(load_acls(tmp_path)) == 1
