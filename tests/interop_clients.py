"""Kafka clients written in other languages, fetched for the ``kafkalog serve`` scenario tests:
kcat (C, on librdkafka) from Debian's packages and KafkaJS (JavaScript) from npm.

Why: "every stock Kafka client" means clients whose protocol code no one here wrote; the
Python and Java ones come from PyPI and Maven, these two from their own registries. Both land
under ``~/.cache/kafkalog`` (never in the repository): kcat with ``apt-get download`` and
``dpkg -x`` (no root, nothing installed system-wide; a kcat already on PATH is used as it is),
KafkaJS with ``npm install --prefix``. The versions are pinned here.

What it refuses to do: install anything outside the cache. A missing ``apt-get``/``npm``
makes these tests skip locally but fail under ``CI=true`` (``kafka_oracle.unavailable``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kafka_oracle import CACHE, unavailable

KAFKAJS_VERSION = "2.2.4"
KCAT_PACKAGES = ("kcat", "librdkafka1", "libyajl2")  # kcat and what it links beyond libc


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        unavailable(f"{' '.join(cmd)} failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")


def kcat() -> tuple[str, dict[str, str]]:
    """The kcat command and the environment to run it in."""
    found = shutil.which("kcat")
    if found:
        return found, dict(os.environ)
    root = CACHE / "kcat"
    binary = root / "usr" / "bin" / "kcat"
    env = dict(os.environ, LD_LIBRARY_PATH=str(root / "usr" / "lib" / "x86_64-linux-gnu"))
    if not binary.exists():
        for tool in ("apt-get", "dpkg"):
            if shutil.which(tool) is None:
                unavailable(f"'{tool}' is not on PATH: kcat comes from Debian's packages")
        debs = CACHE / "kcat-debs"
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        _run(["apt-get", "download", *KCAT_PACKAGES], debs)
        staging = CACHE / f"kcat.{os.getpid()}.tmp"
        for deb in sorted(debs.glob("*.deb")):
            _run(["dpkg", "-x", str(deb), str(staging)], debs)
        shutil.rmtree(root, ignore_errors=True)
        os.replace(staging, root)
    return str(binary), env


def kafkajs() -> Path:
    """The ``node_modules`` directory holding KafkaJS (for NODE_PATH)."""
    prefix = CACHE / f"kafkajs-{KAFKAJS_VERSION}"
    modules = prefix / "node_modules"
    if not (modules / "kafkajs" / "package.json").exists():
        for tool in ("node", "npm"):
            if shutil.which(tool) is None:
                unavailable(f"'{tool}' is not on PATH: the KafkaJS scenario needs Node.js")
        prefix.mkdir(parents=True, exist_ok=True)
        _run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
             f"kafkajs@{KAFKAJS_VERSION}"],
            prefix,
        )  # fmt: skip
    return modules


if __name__ == "__main__":  # `make interop-clients`: fetch them before the tests
    print(f"kcat: {kcat()[0]}")
    print(f"KafkaJS {KAFKAJS_VERSION}: {kafkajs()}")
