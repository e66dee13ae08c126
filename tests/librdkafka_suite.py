"""librdkafka's own integration suite, run against ``kafkalog serve`` or against Apache Kafka.

Why: kafkalog's server tests are scenarios written here; a client's own suite is a stricter
judge, written by people who know what a broker must do. This builds librdkafka's
``tests/test-runner`` from Debian's source package (pinned and checked below, unpacked and built
under ``~/.cache/kafkalog``, nothing in the repository), starts one broker, and runs the tests
listed in ``interop/librdkafka-tests.txt``: every test of the suite's broker list that passes
against a single-node Apache Kafka. ``interop/librdkafka-single-node.txt`` lists the edits that
make a test written for a three-broker cluster run on one node (each changes only the value it
names, and says why).

    python tests/librdkafka_suite.py                  # against kafkalog serve
    python tests/librdkafka_suite.py --against kafka  # the baseline: Apache Kafka 4.3.1
    python tests/librdkafka_suite.py --tests 0011,0012

It prints one line per test and a summary, and exits 1 when a listed test fails (or 2 when the
suite cannot be built or a broker does not start).
Refuses: installing anything outside the cache; judging a test it did not run (a test the
runner skips is reported as skipped, not passed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from kafka_oracle import CACHE, KafkaBroker, free_port, unavailable

REPO = Path(__file__).resolve().parent.parent
VERSION = "2.14.2"
SOURCE = f"http://deb.debian.org/debian/pool/main/libr/librdkafka/librdkafka_{VERSION}.orig.tar.gz"
SHA256 = "4d53568c13717b167d12c7b2a0fe12aeb5d6bfe02de53df5b68f86d870a81b33"
KAFKA_VERSION = "4.3.1"  # the broker version the suite is told (TEST_KAFKA_VERSION)
TEST_LIST = REPO / "interop" / "librdkafka-tests.txt"
SINGLE_NODE = REPO / "interop" / "librdkafka-single-node.txt"

# The broker settings of both runs: what the suite's own docker set-up gives a broker.
BROKER_SETTINGS = {
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "50",
}


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as out:
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        unavailable(f"librdkafka's suite did not build ({' '.join(cmd)}):\n{tail}")


def single_node_edits() -> list[tuple[str, str, str]]:
    """(file, text, replacement) of each edit: lines of ``file | text | replacement | why``."""
    edits = []
    for line in SINGLE_NODE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        file, text, replacement, _why = (part.strip() for part in line.split("|"))
        edits.append((file, text, replacement))
    return edits


def build() -> Path:
    """The built ``tests`` directory of librdkafka's source (built once, then cached)."""
    edits = single_node_edits()
    stamp = hashlib.sha256(repr(edits).encode()).hexdigest()[:12]
    root = CACHE / f"librdkafka-{VERSION}-{stamp}"
    runner = root / "tests" / "test-runner"
    if (root / "built").exists() and runner.exists():
        return root / "tests"
    for tool in ("make", "gcc", "g++"):
        if shutil.which(tool) is None:
            unavailable(f"'{tool}' is not on PATH: librdkafka's suite is built from source")
    shutil.rmtree(root, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / f"librdkafka_{VERSION}.orig.tar.gz"
    if not archive.exists() or hashlib.sha256(archive.read_bytes()).hexdigest() != SHA256:
        partial = archive.with_suffix(f".{os.getpid()}.part")
        with urllib.request.urlopen(SOURCE, timeout=300) as response:
            partial.write_bytes(response.read())
        if hashlib.sha256(partial.read_bytes()).hexdigest() != SHA256:
            partial.unlink()
            unavailable(f"{SOURCE} does not have the pinned SHA-256 {SHA256}")
        os.replace(partial, archive)
    staging = Path(tempfile.mkdtemp(prefix="librdkafka.", dir=CACHE))
    shutil.unpack_archive(archive, staging)
    (source,) = staging.iterdir()  # the tarball's one top directory
    for file, text, replacement in edits:
        path = source / "tests" / file
        content = path.read_text()
        if content.count(text) != 1:
            unavailable(f"single-node edit not found exactly once in {file}: {text!r}")
        path.write_text(content.replace(text, replacement))
    os.replace(source, root)
    shutil.rmtree(staging, ignore_errors=True)
    log = root / "build.log"
    flags = ["--disable-curl", "--disable-sasl", "--disable-ssl", "--disable-gssapi"]
    _run(["./configure", *flags], root, log)
    _run(["make", f"-j{os.cpu_count() or 2}", "libs"], root, log)
    _run(["make", f"-j{os.cpu_count() or 2}", "-C", "tests", "build"], root, log)
    (root / "built").write_text(VERSION + "\n")
    return root / "tests"


def listed_tests() -> list[str]:
    """The test numbers of ``interop/librdkafka-tests.txt`` (a number opens each line)."""
    found = []
    for line in TEST_LIST.read_text().splitlines():
        match = re.match(r"\s*(\d{4})\b", line)
        if match:
            found.append(match.group(1))
    return found


@contextlib.contextmanager
def kafkalog_serve(root: Path) -> Iterator[str]:
    port = free_port()
    out = (root / "serve.out").open("wb")
    overrides = [f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    overrides += [f"{k}={v}" for k, v in BROKER_SETTINGS.items()]
    cmd = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(root / "data")]
    for override in overrides:
        cmd += ["--override", override]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                unavailable(f"kafkalog serve died at start:\n{(root / 'serve.out').read_text()}")
            with contextlib.suppress(OSError), _connect(port):
                break
            time.sleep(0.2)
        else:
            unavailable("kafkalog serve did not listen in 60 s")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


def _connect(port: int) -> contextlib.closing[object]:
    import socket

    return contextlib.closing(socket.create_connection(("127.0.0.1", port), timeout=0.5))


@contextlib.contextmanager
def apache_kafka(root: Path) -> Iterator[str]:
    broker = KafkaBroker(KAFKA_VERSION, root / "kafka", dict(BROKER_SETTINGS))
    with broker:
        yield broker.bootstrap


def run(tests_dir: Path, bootstrap: str, tests: list[str], workdir: Path) -> dict[str, dict]:
    """Run ``tests`` one at a time; each test's name -> its report entry (state, duration)."""
    (tests_dir / "test.conf").write_text(f"bootstrap.servers={bootstrap}\n")
    report = workdir / "report.json"
    env = dict(
        os.environ,
        TESTS=",".join(tests),
        TEST_KAFKA_VERSION=KAFKA_VERSION,
        TEST_REPORT=str(report),
        LD_LIBRARY_PATH=f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}",
    )
    env.pop("CI", None)  # the runner's CI mode changes its concurrency, not what it checks
    with (workdir / "test-runner.out").open("wb") as out:
        subprocess.run(
            ["./test-runner", "-L", "-E", "-p1"],
            cwd=tests_dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return _results(report, workdir / "test-runner.out")


def _results(report: Path, output: Path) -> dict[str, dict]:
    try:
        tests: dict[str, dict] = json.loads(report.read_text())["tests"]
        return tests
    except (OSError, ValueError, KeyError):  # a failure reason with a quote breaks the JSON
        found: dict[str, dict] = {}
        text = re.sub(r"\x1b\[[0-9;]*m|\x1b\(B", "", output.read_text(errors="replace"))
        for name, state in re.findall(r"^\|\s*(\d{4}\S*)\s*\|\s*(\w+)\s*\|", text, re.M):
            found[name] = {"state": state}
        return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", choices=("kafkalog", "kafka"), default="kafkalog")
    parser.add_argument("--tests", help="comma-separated test numbers (default: the list)")
    parser.add_argument("--keep", help="a directory to keep the broker's files and the output")
    args = parser.parse_args()
    tests = args.tests.split(",") if args.tests else listed_tests()
    tests_dir = build()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="librdkafka-suite."))
    workdir.mkdir(parents=True, exist_ok=True)
    broker = kafkalog_serve if args.against == "kafkalog" else apache_kafka
    started = time.monotonic()
    with broker(workdir) as bootstrap:
        results = run(tests_dir, bootstrap, tests, workdir)
    took = time.monotonic() - started
    counts = {"PASSED": 0, "FAILED": 0, "SKIPPED": 0}
    for number in tests:
        entry = next((v for k, v in results.items() if k.startswith(number)), None)
        state = "NOT RUN" if entry is None else entry["state"]
        name = next((k for k in results if k.startswith(number)), number)
        reason = "" if entry is None else entry.get("extra", "")
        counts[state] = counts.get(state, 0) + 1
        print(f"{name:45} {state:8} {reason}".rstrip())
    against = "kafkalog serve" if args.against == "kafkalog" else f"Apache Kafka {KAFKA_VERSION}"
    print(
        f"librdkafka {VERSION}'s suite against {against}: {counts['PASSED']} passed, "
        f"{counts['FAILED']} failed, {counts['SKIPPED']} skipped of {len(tests)} "
        f"in {took:.0f} s (output under {workdir})"
    )
    return 0 if counts["PASSED"] + counts["SKIPPED"] == len(tests) else 1


if __name__ == "__main__":
    sys.exit(main())
