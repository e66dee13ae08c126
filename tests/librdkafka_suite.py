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
suite cannot be built or a broker does not start). A test that fails is run once more; one that
passes then is reported FLAKY, and one listed as known to fail on kafkalog (``# known:``) KNOWN.
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

from kafka_oracle import CACHE, KafkaBroker, free_port, unavailable, write_scripts

REPO = Path(__file__).resolve().parent.parent
VERSION = "2.14.2"
SOURCE = f"http://deb.debian.org/debian/pool/main/libr/librdkafka/librdkafka_{VERSION}.orig.tar.gz"
SHA256 = "4d53568c13717b167d12c7b2a0fe12aeb5d6bfe02de53df5b68f86d870a81b33"
KAFKA_VERSION = "4.3.1"  # the broker version the suite is told (TEST_KAFKA_VERSION)
TEST_LIST = REPO / "interop" / "librdkafka-tests.txt"
SINGLE_NODE = REPO / "interop" / "librdkafka-single-node.txt"

# The broker settings of both runs: what the suite's own cluster (trivup) gives a broker but
# for no initial rebalance delay (trivup leaves Kafka's 3 s, which would add some five minutes
# of waiting to the run), and an authorizer that allows what no ACL denies, so the suite's ACL
# tests (kafka-acls.sh, CreateAcls ...) have something to judge. A test that needs a setting
# as trivup has it says so on its line (`# broker: key=value`) and runs against a broker of
# its own with it.
BROKER_SETTINGS = {
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "50",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
KAFKA_ONLY: dict[str, str] = {}


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as out:
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        unavailable(f"librdkafka's suite did not build ({' '.join(cmd)}):\n{tail}")


def single_node_edits() -> list[tuple[str, str, str, int]]:
    """(file, text, replacement, count) of each edit, from the lines of
    ``file | text | replacement | count | why``: every one of ``count`` occurrences replaced."""
    edits = []
    for line in SINGLE_NODE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        file, text, replacement, count, _why = (part.strip() for part in line.split(" | "))
        edits.append((file, text, replacement, int(count)))
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
    for file, text, replacement, count in edits:
        path = source / "tests" / file
        content = path.read_text()
        if content.count(text) != count:
            unavailable(f"single-node edit not found {count} time(s) in {file}: {text!r}")
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


def listed_tests() -> dict[str, str | None]:
    """The test numbers of ``interop/librdkafka-tests.txt`` (a number opens each line), each
    with the reason kafkalog is known to fail it (``# known: ...`` on its line), if it is."""
    return {number: notes.get("known") for number, notes in _listed().items()}


def broker_settings() -> dict[str, dict[str, str]]:
    """The listed tests that need a broker setting of their own (``# broker: key=value ...``
    on their line): number -> those settings, on top of BROKER_SETTINGS."""
    found = {}
    for number, notes in _listed().items():
        if "broker" in notes:
            found[number] = dict(pair.split("=", 1) for pair in notes["broker"].split())
    return found


def _listed() -> dict[str, dict[str, str]]:
    """Each listed number with the ``# name: text`` notes of its line."""
    found: dict[str, dict[str, str]] = {}
    for line in TEST_LIST.read_text().splitlines():
        match = re.match(r"\s*(\d{4})\b(.*)", line)
        if match:
            notes = (part.partition(":") for part in match.group(2).split("#"))
            found[match.group(1)] = {k.strip(): v.strip() for k, sep, v in notes if sep}
    return found


@contextlib.contextmanager
def kafkalog_serve(root: Path, settings: dict[str, str]) -> Iterator[str]:
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    out = (root / "serve.out").open("wb")
    overrides = [f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    overrides += [f"{k}={v}" for k, v in settings.items()]
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
def apache_kafka(root: Path, settings: dict[str, str]) -> Iterator[str]:
    broker = KafkaBroker(KAFKA_VERSION, root / "kafka", {**settings, **KAFKA_ONLY})
    with broker:
        yield broker.bootstrap


def run(tests_dir: Path, bootstrap: str, tests: list[str], workdir: Path) -> dict[str, dict]:
    """Run ``tests`` one number at a time (a test that times out ends its runner, and would
    take every test after it along); each test's name -> its report entry (state, duration)."""
    (tests_dir / "test.conf").write_text(f"bootstrap.servers={bootstrap}\n")
    kafka_path = workdir / "kafka-scripts"  # KAFKA_PATH: what the suite runs as bin/*.sh
    write_scripts(KAFKA_VERSION, kafka_path / "bin")
    results: dict[str, dict] = {}
    workdir.mkdir(parents=True, exist_ok=True)
    for number in tests:
        report = workdir / f"report-{number}.json"
        output = workdir / f"test-runner-{number}.out"
        env = dict(
            os.environ,
            TESTS=number,
            TEST_KAFKA_VERSION=KAFKA_VERSION,
            TEST_REPORT=str(report),
            KAFKA_PATH=str(kafka_path),
            BROKERS=bootstrap,
            LD_LIBRARY_PATH=f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}",
        )
        env.pop("CI", None)  # the runner's CI mode changes its concurrency, not what it checks
        with output.open("wb") as out:
            subprocess.run(
                ["./test-runner", "-L", "-E", "-p1"],
                cwd=tests_dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
                timeout=900,
            )
        found = {k: v for k, v in _results(report, output).items() if k.startswith(number + "_")}
        results.update(
            {k: v for k, v in found.items() if v["state"] != "SKIPPED" or k not in results}
        )
    return results


def _failed(results: dict[str, dict], number: str) -> bool:
    entries = [v["state"] for k, v in results.items() if k.startswith(number + "_")]
    return not entries or any(state not in ("PASSED", "SKIPPED") for state in entries)


def _results(report: Path, output: Path) -> dict[str, dict]:
    try:
        tests: dict[str, dict] = json.loads(report.read_text())["tests"]
        return tests
    except (OSError, ValueError, KeyError):  # a failure reason with a quote breaks the JSON
        found: dict[str, dict] = {}
        text = _plain_text(output)
        for name, state in re.findall(r"^\|\s*(\d{4}\S*)\s*\|\s*(\w+)\s*\|", text, re.M):
            found[name] = {"state": state}
        return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", choices=("kafkalog", "kafka"), default="kafkalog")
    parser.add_argument("--tests", help="comma-separated test numbers (default: the list)")
    parser.add_argument("--keep", help="a directory to keep the broker's files and the output")
    args = parser.parse_args()
    listed = listed_tests()
    tests = args.tests.split(",") if args.tests else list(listed)
    tests_dir = build()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="librdkafka-suite."))
    workdir.mkdir(parents=True, exist_ok=True)
    on_kafkalog = args.against == "kafkalog"
    broker = kafkalog_serve if on_kafkalog else apache_kafka
    started = time.monotonic()
    own = broker_settings()
    # a broker's extra settings -> the tests run against it
    batches: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for number in tests:
        batches.setdefault(tuple(sorted(own.get(number, {}).items())), []).append(number)
    results: dict[str, dict] = {}
    retried: dict[str, dict] = {}
    homes: dict[str, Path] = {}  # where each test's output is
    for i, (extra, batch) in enumerate(batches.items()):
        where = workdir / f"broker-{i}" if i else workdir  # the first batch at the top
        homes.update(dict.fromkeys(batch, where))
        settings = {**BROKER_SETTINGS, **dict(extra)}
        with broker(where, settings) as bootstrap:
            got = run(tests_dir, bootstrap, batch, where)
            failed = [n for n in batch if _failed(got, n) and not (on_kafkalog and listed.get(n))]
            if failed:
                retried.update(run(tests_dir, bootstrap, failed, where / "again"))
        results.update(got)
    took = time.monotonic() - started
    counts: dict[str, int] = {}
    unexpected = []
    for number in tests:
        entries = [(k, v["state"]) for k, v in results.items() if k.startswith(number + "_")]
        known = listed.get(number) if on_kafkalog else None
        for name, state in entries or [(number, "NOT RUN")]:
            if state == "FAILED" and known:
                state = "KNOWN"
            elif (
                state not in ("PASSED", "SKIPPED")
                and retried.get(name, {}).get("state") == "PASSED"
            ):
                state = "FLAKY"  # failed, then passed when run again: said, not hidden
            elif state not in ("PASSED", "SKIPPED", "FLAKY"):
                unexpected.append(name)
            counts[state] = counts.get(state, 0) + 1
            note = f"known: {known}" if state == "KNOWN" else ""
            print(f"{name:45} {state:8} {note}".rstrip())
    against = "kafkalog serve" if on_kafkalog else f"Apache Kafka {KAFKA_VERSION}"
    summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
    print(
        f"librdkafka {VERSION}'s suite against {against}: {summary} "
        f"({sum(counts.values())} tests, {len(tests)} numbers) in {took:.0f} s "
        f"(output under {workdir})"
    )
    if unexpected:
        print(f"failed: {', '.join(unexpected)}")
        for number in sorted({name[:4] for name in unexpected}):
            home = homes[number]
            for attempt in (home, home / "again"):
                for line in failure_reasons(attempt / f"test-runner-{number}.out"):
                    print(f"  {attempt.name}/{number}: {line}")
    return 1 if unexpected else 0


def _plain_text(output: Path) -> str:
    """A runner's output without its terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m|\x1b\(B", "", output.read_text(errors="replace"))


def failure_reasons(output: Path, most: int = 6) -> list[str]:
    """The runner's own words on why a test failed: each ``### Test ... failed at ...`` line
    and the assertion under it, so that a CI log that shows only the summary still says why."""
    try:
        lines = _plain_text(output).splitlines()
    except OSError:
        return []
    found: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("### Test ") and "failed at" in line:
            found += [line[:300], *(x[:300] for x in lines[i + 1 : i + 2] if x.strip())]
    return found[: 2 * most]


if __name__ == "__main__":
    sys.exit(main())
