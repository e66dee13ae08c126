"""librdkafka's own integration suite against ``kafkalog serve``: every test of
``interop/librdkafka-tests.txt`` (those that pass against a single-node Apache Kafka 4.3.1)
must pass, but those listed as known to fail on kafkalog, each with its reason. It is
``make librdkafka-suite`` run from the test suite, so CI judges the broker by a client's own
tests (about 23 minutes of the run); ``make librdkafka-suite AGAINST=kafka`` shows the baseline.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.one_codec]

RUNNER = Path(__file__).resolve().parent / "librdkafka_suite.py"


@pytest.mark.timeout(3600)
def test_librdkafka_suite_passes_against_kafkalog_serve(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "--against", "kafkalog", "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=3500,
        check=False,
    )
    report = "\n".join(
        line for line in proc.stdout.splitlines() if not line.endswith(("PASSED", "SKIPPED"))
    )
    print(proc.stdout.splitlines()[-1] if proc.stdout else proc.stderr[-3000:])
    assert proc.returncode == 0, f"{report}\n{proc.stderr[-3000:]}"
