"""kafkalog on a Spark standalone cluster, as the README's try-out starts one: a master and a
worker from PySpark's own ``spark-class``, executors on a Python with kafkalog installed (the
way that works), reading and writing through ``format("kafkalog")`` with the compiled codec.
And the warning an executor logs, once, when it runs the pure-Python codec by accident."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from kafkalog import LogManager, Record
from kafkalog.records import codec
from kafkalog.spark import executor_codec

pytestmark = pytest.mark.one_codec  # executors choose their codec as the driver does

SPARK_HOME = Path(__import__("pyspark").__file__).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(path: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {text!r}:\n{path.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def standalone(
    root: Path, workers: int = 1, cores: int = 2, env: dict[str, str] | None = None
) -> Iterator[str]:
    """A master and ``workers`` workers from PySpark's ``spark-class``; yields the master URL.
    Worker ``n`` works in ``root/work-n`` (``root/work`` when there is one)."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        **(env or {}),
    }
    port, spark_class = _port(), str(SPARK_HOME / "bin" / "spark-class")
    master_log = root / "master.log"
    procs = []
    try:
        with master_log.open("wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(_port())],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        _wait_for(master_log, "I have been elected leader")
        for n in range(workers):
            log = root / ("worker.log" if workers == 1 else f"worker-{n}.log")
            work = root / ("work" if workers == 1 else f"work-{n}")
            with log.open("wb") as out:
                procs.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker",
                     f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                     "--webui-port", str(_port()), "--cores", str(cores), "--memory", "1g",
                     "--work-dir", str(work)],
                    env=env, stdout=out, stderr=subprocess.STDOUT,
                ))  # fmt: skip
            _wait_for(log, "Successfully registered with master")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("standalone")
    with standalone(root) as master:
        yield master, root / "work"


DRIVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import kafkalog.spark
    master, data = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master(master).appName("kafkalog-cluster-test")
             .config("spark.executor.memory", "512m").getOrCreate())
    kafkalog.spark.register(spark)
    df = spark.read.format("kafkalog").option("path", data).option("subscribe", "t").load()
    print("count", df.count())
    compiled = df.rdd.mapPartitions(lambda rows: [__import__(
        "kafkalog.records.codec", fromlist=["codec"]).compiled_codec() is not None]).collect()
    print("compiled", all(compiled))
    (df.selectExpr("key", "value").write.format("kafkalog").option("path", data)
       .option("topic", "copy").mode("append").save())
    spark.stop()
    """
)


@pytest.mark.slow
def test_a_standalone_cluster_reads_and_writes_with_the_compiled_codec(
    cluster: tuple[str, Path], tmp_path: Path
) -> None:
    master, work = cluster
    data = tmp_path / "data"
    with LogManager([data]) as manager:
        manager.create_topic("t", 2)
        for p in range(2):
            manager.get_log("t", p).append([Record(b"v%d" % i, b"k") for i in range(100)])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("KAFKALOG_PURE_PYTHON", None)
    proc = subprocess.run([sys.executable, "-c", DRIVER, master, str(data)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "count 200" in proc.stdout and "compiled True" in proc.stdout
    with LogManager([data]) as manager:
        assert sum(manager.get_log("copy", p).log_end_offset for p in range(1)) == 200
    executor_logs = "".join(p.read_text(errors="replace") for p in work.rglob("stderr"))
    assert executor_logs and "pure-Python record codec" not in executor_logs


def test_an_executor_without_the_compiled_codec_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(codec, "_COMPILED", None)
    monkeypatch.setattr(codec, "_load_error", ["No module named 'kafkalog.records._fastcodec'"])
    monkeypatch.setattr(executor_codec, "_checked", [])
    monkeypatch.delenv("KAFKALOG_PURE_PYTHON", raising=False)
    monkeypatch.setattr(
        executor_codec.kafkalog, "__file__", "/tmp/x/kafkalog.zip/kafkalog/__init__.py"
    )
    with caplog.at_level(logging.WARNING, logger="kafkalog.spark"):
        assert executor_codec.check_executor_codec()
        assert not executor_codec.check_executor_codec()  # once per process
    (record,) = caplog.records
    text = record.getMessage()
    assert "runs the pure-Python record codec" in text and "No module named" in text
    assert "cannot be imported from a zip (--py-files)" in text
    monkeypatch.setattr(executor_codec, "_checked", [])
    monkeypatch.setenv("KAFKALOG_PURE_PYTHON", "1")  # chosen, not an accident: no warning
    assert not executor_codec.check_executor_codec()
