"""``kafkalog serve`` with authentication and TLS: SASL/PLAIN and SASL/SCRAM-SHA-256/512 on
SASL_PLAINTEXT and SASL_SSL listeners, SSL with client certificates, through kafka-python,
librdkafka (confluent-kafka) and Kafka's own Java console tools; and at the byte level, that a
client without valid credentials gets Kafka's authentication error and nothing else."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, TOOL_LOG, classpath
from kafkalog import LogManager
from kafkalog.errors import InvalidArgumentError, InvalidConfigError
from kafkalog.protocol.wire import make
from kafkalog.server import scram_store, serve
from server_helpers import api_versions_request, frame, metadata_request, read_frame, request_module

pytestmark = [pytest.mark.one_codec, pytest.mark.timeout(300)]

LATEST = KAFKA_VERSIONS[-1]
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob \\"quoted\\" secret";')  # fmt: skip
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def _sasl_overrides(protocol: str, certs: Path | None = None) -> dict[str, str]:
    out = {
        "listeners": f"{protocol}://127.0.0.1:0",
        "sasl.enabled.mechanisms": MECHANISMS,
        f"listener.name.{protocol.lower()}.plain.sasl.jaas.config": JAAS,
    }
    if certs is not None:
        out |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "server.pem")}
    return out


def _add_users(log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    creds = {}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        m, user, cred = scram_store.parse_add_scram(f"{mechanism}=[name=carol,password=carol-pw]")
        creds[(m, user)] = cred
    scram_store.save_credentials(log_dir, creds)


@pytest.fixture
def sasl_plaintext(tmp_path: Path) -> Iterator[Any]:
    _add_users(tmp_path)
    with serve(tmp_path, overrides=_sasl_overrides("SASL_PLAINTEXT")) as server:
        yield server


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("PLAIN", "alice", "alice-secret"), ("PLAIN", "bob", 'bob "quoted" secret'),
     ("SCRAM-SHA-256", "carol", "carol-pw"), ("SCRAM-SHA-512", "carol", "carol-pw")],
)  # fmt: skip
def test_kafka_python_authenticates_with_each_mechanism(
    sasl_plaintext: Any, mechanism: str, user: str, password: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    auth = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}  # fmt: skip
    bs = sasl_plaintext.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=bs, **auth)
    producer.send("secure", b"hello from " + user.encode()).get(10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bs, consumer_timeout_ms=3000, **auth)
    consumer.assign([TopicPartition("secure", 0)])
    consumer.seek(TopicPartition("secure", 0), 0)
    assert [m.value for m in consumer] == [b"hello from " + user.encode()]
    consumer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_gets_kafkas_error_and_nothing_written(
    sasl_plaintext: Any, tmp_path: Path, mechanism: str
) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    user = "alice" if mechanism == "PLAIN" else "carol"
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=sasl_plaintext.bootstrap_servers,
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                      sasl_plain_username=user, sasl_plain_password="wrong",
                      max_block_ms=3000, api_version=(2, 8)).send("nope", b"x").get(5)  # fmt: skip
    assert "nope" not in sasl_plaintext.manager.topics()


def _port(server: Any) -> int:
    return int(server.bootstrap_servers.rsplit(":", 1)[1])


def _sasl_frames(mechanism: str, token: bytes) -> bytes:
    hs = request_module(17, 1)
    au = request_module(36, 2)
    return frame(17, 1, make(hs, "SaslHandshakeRequest", mechanism=mechanism), 2) + frame(
        36, 2, make(au, "SaslAuthenticateRequest", auth_bytes=token), 3
    )


def _responses(port: int, data: bytes, wanted: int) -> list[bytes]:
    """The answers to ``data``: ``wanted`` of them, or fewer if the server closes first."""
    out: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        while len(out) < wanted and (response := read_frame(sock)):
            out.append(response)
    return out


def test_before_authentication_only_the_handshake_is_answered(sasl_plaintext: Any) -> None:
    """A Metadata request on a SASL listener before authenticating closes the connection with
    no answer (Kafka's SaslServerAuthenticator); ApiVersions is answered; an unknown mechanism
    gets UNSUPPORTED_SASL_MECHANISM with the enabled list; a wrong PLAIN password gets
    SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection is closed."""
    port = _port(sasl_plaintext)
    assert _responses(port, frame(3, 12, metadata_request(12, ["x"], allow=True)), 1) == []
    assert len(_responses(port, frame(18, 3, api_versions_request(3)), 1)) == 1
    hs = request_module(17, 1)
    gssapi = frame(17, 1, make(hs, "SaslHandshakeRequest", mechanism="GSSAPI"), 2)
    [handshake] = _responses(port, gssapi + gssapi, 2)  # answered, then closed
    assert b"SCRAM-SHA-512" in handshake and handshake[8:10] == (33).to_bytes(2, "big")
    replies = _responses(port, _sasl_frames("PLAIN", b"\x00alice\x00wrong")
                         + frame(3, 12, metadata_request(12, None), 4), 3)  # fmt: skip
    assert len(replies) == 2  # the handshake and the failure; the Metadata never answered
    assert b"Invalid username or password" in replies[1]
    good = _responses(port, _sasl_frames("PLAIN", b"\x00alice\x00alice-secret")
                      + frame(3, 12, metadata_request(12, None), 4), 3)  # fmt: skip
    assert len(good) == 3  # authenticated: the Metadata is answered


def test_sasl_ssl_scram_with_kafkas_java_console_tools(tmp_path: Path, certs: Path) -> None:
    """Kafka's own console producer and consumer over SASL_SSL with SCRAM-SHA-256, trusting
    the test CA (a PEM trust store); a wrong password fails with Kafka's message."""
    _add_users(tmp_path / "data")
    overrides = _sasl_overrides("SASL_SSL", certs)

    def client_config(password: str) -> Path:
        path = tmp_path / f"client-{password}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="carol" password="{password}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={certs / 'ca.pem'}\n"
        )
        return path

    def tool(main: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = ["java", *JVM_FLAGS, *TOOL_LOG, "-cp", classpath(LATEST), main, *args]
        return subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=120, check=False
        )

    with serve(tmp_path / "data", overrides=overrides) as server:
        bs = server.bootstrap_servers.replace("127.0.0.1", "localhost")
        good = str(client_config("carol-pw"))
        produced = tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bs,
                        "--topic", "tls", "--command-config", good, stdin="one\ntwo\n")  # fmt: skip
        assert produced.returncode == 0, produced.stderr[-3000:]
        consumed = tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                        bs, "--topic", "tls", "--from-beginning", "--max-messages", "2",
                        "--command-config", good)  # fmt: skip
        assert consumed.stdout.split() == ["one", "two"], consumed.stderr[-3000:]
        bad = tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bs,
                   "--topic", "tls", "--command-config", str(client_config("nope")),
                   stdin="three\n")  # fmt: skip
        assert "Authentication failed" in bad.stderr, bad.stderr[-3000:]
    with LogManager([tmp_path / "data"]) as manager:
        values = [r.value for r in manager.get_log("tls", 0).read_records(0, 1 << 20)]
    assert values == [b"one", b"two"]


def _delivery_error(producer: Any, topic: str, value: bytes) -> object:
    """The error librdkafka reports for one message (None: delivered)."""
    outcome: list[object] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1
    return outcome[0]


def test_ssl_with_required_client_certificates_through_librdkafka(
    tmp_path: Path, certs: Path
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    overrides = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
        "ssl.client.auth": "required",
    }
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}
    mine = {"ssl.certificate.location": str(certs / "client.crt"),
            "ssl.key.location": str(certs / "client.key")}  # fmt: skip
    with serve(tmp_path, overrides=overrides) as server:
        bs = server.bootstrap_servers
        producer = Producer({"bootstrap.servers": bs, **tls, **mine})
        producer.produce("mtls", b"with a certificate")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bs, "group.id": "g", **tls, **mine})
        consumer.assign([TopicPartition("mtls", 0, 0)])
        msg = None
        deadline = time.monotonic() + 15
        while msg is None or msg.error() is not None:
            assert time.monotonic() < deadline
            msg = consumer.poll(0.5)
        assert msg.value() == b"with a certificate"
        consumer.close()
        anonymous = Producer({"bootstrap.servers": bs, "message.timeout.ms": 3000, **tls})
        assert _delivery_error(anonymous, "mtls", b"without one") is not None  # refused
    with LogManager([tmp_path]) as manager:
        assert [r.value for r in manager.get_log("mtls", 0).read_records(0, 1 << 20)] == [
            b"with a certificate"
        ]


def test_sasl_ssl_plain_through_librdkafka(tmp_path: Path, certs: Path) -> None:
    from confluent_kafka import Producer

    with serve(tmp_path, overrides=_sasl_overrides("SASL_SSL", certs)) as server:
        config = {"bootstrap.servers": server.bootstrap_servers, "security.protocol": "SASL_SSL",
                  "ssl.ca.location": str(certs / "ca.pem"), "sasl.mechanism": "PLAIN",
                  "sasl.username": "alice", "message.timeout.ms": 5000}  # fmt: skip
        good = Producer({**config, "sasl.password": "alice-secret"})
        assert _delivery_error(good, "p", b"ok") is None
        bad = Producer({**config, "sasl.password": "wrong"})
        assert _delivery_error(bad, "p", b"refused") is not None
        assert server.manager is not None
        log = server.manager.get_log("p", 0)
        assert [r.value for r in log.read_records(0, 1 << 20)] == [b"ok"]


def test_bad_security_settings_are_refused_at_start(tmp_path: Path, certs: Path) -> None:
    def start(**overrides: str) -> None:
        with serve(tmp_path, overrides=overrides):
            pass

    with pytest.raises(InvalidConfigError, match="not GSSAPI"):
        start(listeners="SASL_PLAINTEXT://127.0.0.1:0")
    with pytest.raises(InvalidConfigError, match="PLAIN needs users"):
        start(listeners="SASL_PLAINTEXT://127.0.0.1:0", **{"sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(InvalidConfigError, match="JKS stores are not read"):
        start(listeners="SSL://127.0.0.1:0", **{"ssl.keystore.location": str(certs / "x.jks")})
    with pytest.raises(InvalidConfigError, match="cannot read a certificate chain"):
        missing = str(certs / "missing.pem")
        start(listeners="SSL://127.0.0.1:0",
              **{"ssl.keystore.type": "PEM", "ssl.keystore.location": missing})  # fmt: skip
    with pytest.raises(InvalidConfigError, match="needs a trust store"):
        keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "server.pem")}
        start(listeners="SSL://127.0.0.1:0", **keystore, **{"ssl.client.auth": "required"})
    with pytest.raises(InvalidArgumentError, match="needs name= and password="):
        scram_store.parse_add_scram("SCRAM-SHA-256=[name=alice]")
    with pytest.raises(InvalidArgumentError, match=r"iterations must be 4096\.\.16384"):
        scram_store.parse_add_scram("SCRAM-SHA-256=[name=a,password=b,iterations=10]")
    (tmp_path / scram_store.FILE_NAME).write_text("{not json")
    with pytest.raises(Exception, match="cannot read SCRAM credentials"):
        start(**_sasl_overrides("SASL_PLAINTEXT"))


def test_serve_add_scram_stores_a_salted_credential(tmp_path: Path) -> None:
    """``kafkalog serve --add-scram`` (kafka-storage format's syntax) stores the user before
    the server starts; the password itself is never written."""
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["serve", "--log-dirs", str(tmp_path), *args])

    bad = run("--add-scram", "SCRAM-SHA-1=[name=a,password=b]")
    assert bad.exit_code != 0 and "is not SCRAM-SHA-256=[name=" in bad.output
    with socket.socket() as taken:  # the start fails after the credential is stored
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run("--add-scram", "SCRAM-SHA-512=[name=dave,password=dave-pw,iterations=8192]",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}")  # fmt: skip
    stored = scram_store.load_credentials(tmp_path)
    assert stored[("SCRAM-SHA-512", "dave")].iterations == 8192
    assert b"dave-pw" not in (tmp_path / scram_store.FILE_NAME).read_bytes()


def test_users_are_managed_through_the_broker_with_scram_credential_apis(tmp_path: Path) -> None:
    """KIP-554 (kafka-configs --entity-type users, the Admin APIs): a SCRAM user added through
    the broker authenticates at once, is described with its mechanism and iterations, and
    after its deletion no longer logs in; errors per user as Kafka's."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    _add_users(tmp_path)
    with serve(tmp_path, overrides=_sasl_overrides("SASL_PLAINTEXT")) as server:

        def client(user: str, password: str, mechanism: str) -> dict[str, str]:
            return {"bootstrap.servers": server.bootstrap_servers,
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                    "sasl.username": user, "sasl.password": password}  # fmt: skip

        admin = AdminClient(client("carol", "carol-pw", "SCRAM-SHA-256"))
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        done = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("dave", info, b"dave-pw")]
        )
        done["dave"].result(10)
        described = admin.describe_user_scram_credentials(["dave"])["dave"].result(10)
        assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_512, 8192)
        ]
        dave = AdminClient(client("dave", "dave-pw", "SCRAM-SHA-512"))
        assert dave.list_topics(timeout=10).brokers  # logged in with the new credential
        too_few = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000)
        refused = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("erin", too_few, b"x")]
        )
        with pytest.raises(KafkaException, match="iterations"):
            refused["erin"].result(10)
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)]
        )["dave"].result(10)
        with pytest.raises(KafkaException):
            admin.describe_user_scram_credentials(["dave"])["dave"].result(10)
    assert ("SCRAM-SHA-512", "dave") not in scram_store.load_credentials(tmp_path)


@pytest.mark.kafka
def test_kafka_configs_adds_a_scram_user_through_kafkalog(tmp_path: Path) -> None:
    """``kafka-configs --entity-type users --alter --add-config SCRAM-SHA-256=[...]`` from
    Kafka's own tools, over a SCRAM listener; the new user then logs in."""
    from confluent_kafka.admin import AdminClient

    from kafka_oracle import java

    _add_users(tmp_path)
    with serve(tmp_path, overrides=_sasl_overrides("SASL_PLAINTEXT")) as server:
        props = tmp_path / "admin.properties"
        props.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="carol" password="carol-pw";\n'
        )
        out = java(LATEST, "kafka.admin.ConfigCommand", "--bootstrap-server",
                   server.bootstrap_servers, "--command-config", str(props), "--entity-type",
                   "users", "--entity-name", "frank", "--alter", "--add-config",
                   "SCRAM-SHA-256=[iterations=8192,password=frank-pw]")  # fmt: skip
        assert "Completed updating config for user frank" in out
        # (its --describe of users also asks for client quotas, which come with quotas)
        frank = AdminClient({"bootstrap.servers": server.bootstrap_servers,
                             "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "frank",
                             "sasl.password": "frank-pw"})  # fmt: skip
        assert frank.list_topics(timeout=10).brokers


def test_a_plaintext_and_a_sasl_listener_serve_side_by_side(tmp_path: Path) -> None:
    """Two listeners over one broker, as a Kafka user configures an internal and an external
    one: each answers Metadata with its own advertised address, the SASL one still refuses a
    client without credentials, and a record produced through one is read through the
    other. The connection limits count both."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "max.connections.per.ip": "4",
    }
    auth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-secret"}  # fmt: skip
    with serve(tmp_path, overrides=overrides) as server:
        inside = server.bootstrap_servers_for("PLAINTEXT")
        outside = server.bootstrap_servers_for("sasl_plaintext")
        assert inside != outside and server.bootstrap_servers == inside
        for bootstrap, extra in ((inside, {}), (outside, auth)):
            brokers = (
                AdminClient({"bootstrap.servers": bootstrap, **extra})
                .list_topics(timeout=10)
                .brokers
            )
            assert [f"{b.host}:{b.port}" for b in brokers.values()] == [bootstrap]
        producer = Producer({"bootstrap.servers": inside})
        producer.produce("two-doors", b"in through PLAINTEXT", partition=0)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": outside, "group.id": "g",
                             "auto.offset.reset": "earliest", **auth})  # fmt: skip
        consumer.subscribe(["two-doors"])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        assert message is not None and message.value() == b"in through PLAINTEXT"
        consumer.close()
        # no credentials on the SASL listener: only the handshake is answered
        host, port = outside.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(frame(3, 1, metadata_request(1, None), 7))
            sock.settimeout(10)
            assert sock.recv(1) == b""
        # max.connections.per.ip counts the connections of both listeners
        held = [socket.create_connection(_address(inside), timeout=10) for _ in range(2)]
        held += [socket.create_connection(_address(outside), timeout=10) for _ in range(2)]
        try:
            deadline = time.monotonic() + 10
            while server._channel.connections < 4 and time.monotonic() < deadline:
                time.sleep(0.02)
            with socket.create_connection(_address(outside), timeout=10) as refused:
                refused.settimeout(10)
                assert refused.recv(1) == b""
        finally:
            for sock in held:
                sock.close()


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)
