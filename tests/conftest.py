"""Test-wide settings: hypothesis is derandomized so every run explores the same examples, and
every test runs on both record codecs, the compiled one and the pure-Python reference, in one
pytest run (the ``record_codec`` fixture)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from s3_server import S3Server

settings.register_profile(
    "kafkalog",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("KAFKALOG_EXAMPLES", "100")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("kafkalog")

GOLDEN = Path(__file__).parent / "golden"
CODECS = ("compiled", "reference")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "one_codec: the test compares the two codecs itself; run it once"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test under each codec. The parameter is session-scoped, so pytest runs the
    whole suite on one codec and then on the other, and fixtures that do not depend on the
    codec (the Kafka oracle's broker runs) are shared by both halves."""
    if "record_codec" not in metafunc.fixturenames:
        return
    one = metafunc.definition.get_closest_marker("one_codec") is not None
    metafunc.parametrize(
        "record_codec", CODECS[:1] if one else CODECS, indirect=True, scope="session"
    )


@pytest.fixture(scope="session", autouse=True)
def record_codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """Select the record codec for the tests, and for the processes they start (crash children,
    Spark's Python workers) through KAFKALOG_PURE_PYTHON."""
    from kafkalog.records.codec import compiled_codec, use_fast_path

    name: str = getattr(request, "param", CODECS[0])
    if name == "compiled" and compiled_codec() is None:
        if os.environ.get("KAFKALOG_REQUIRE_FAST") == "1":
            pytest.fail("make test expects the compiled codec (pip install -e . builds it)")
        pytest.skip("the compiled codec (_fastcodec) is not built")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKALOG_PURE_PYTHON", "1" if name == "reference" else "0")
        use_fast_path(name == "compiled")
        try:
            yield name
        finally:
            use_fast_path(True)


def golden_bytes(name: str) -> bytes:
    return bytes.fromhex("".join((GOLDEN / name).read_text().split()))


@pytest.fixture
def golden() -> type:
    class _G:
        load = staticmethod(golden_bytes)

    return _G


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every few microseconds, so races show within a bounded run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _kafka_versions() -> tuple[str, ...]:
    from kafka_oracle import KAFKA_VERSIONS

    return KAFKA_VERSIONS


@pytest.fixture(scope="session", params=_kafka_versions())
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> object:
    """Topics a real Kafka broker wrote and stopped on (tests/kafka_scenarios.py), once per
    Kafka version per session, shared by the oracle test modules."""
    pytest.importorskip("confluent_kafka")
    from kafka_scenarios import BrokerWritten, write_topics

    reuse = os.environ.get("KAFKALOG_ORACLE_REUSE")  # a developer's saved run: DIR/out.pickle
    if reuse:
        import pickle

        with open(Path(reuse.format(version=request.param)) / "out.pickle", "rb") as f:
            saved: BrokerWritten = pickle.load(f)
        return saved
    return write_topics(request.param, tmp_path_factory.mktemp(f"kafka-{request.param}"))


@pytest.fixture(scope="module")
def spark(record_codec: str) -> Iterator[object]:
    """A local[2] session per module and codec: its Python workers use the codec the tests run
    on (they read KAFKALOG_PURE_PYTHON when they start)."""
    pytest.importorskip("pyspark")
    import kafkalog.spark

    session = kafkalog.spark.local_session("kafkalog-tests")
    yield session
    session.stop()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for localhost / 127.0.0.1 and a client certificate, as PEM
    (the server's key store is its certificate and key in one file)."""
    d = tmp_path_factory.mktemp("certs")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=kafkalog-test-ca", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext",
                 cwd=d)  # fmt: skip
        (d / f"{name}.pem").write_text(
            (d / f"{name}.crt").read_text() + (d / f"{name}.key").read_text()
        )
    return d


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server in its own process, shared by the tiered storage tests."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "kafkalog-test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "kafkalog-test")
    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    yield server
    server.stop()
