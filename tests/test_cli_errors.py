"""The command line on damaged files and wrong arguments: an ``error:`` line and a non-zero exit,
never a traceback (CliRunner reports any escaping exception other than SystemExit)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog import LogConfig, LogManager, Record
from kafkalog.cli.main import cli


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    props = {"internal.segment.bytes": "2048", "index.interval.bytes": "100"}
    with LogManager(tmp_path, LogConfig.from_properties(props)) as m:
        log = m.create_topic("t", 1)[0]
        for _ in range(20):
            log.append([Record(b"v" * 20, key=b"k") for _ in range(10)])
    part = tmp_path / "t-0"
    (part / "00000000000000000000.index").write_bytes(os.urandom(13))
    (part / "00000000000000000000.timeindex").write_bytes(os.urandom(40))
    (part / "leader-epoch-checkpoint").write_bytes(b"x")
    (tmp_path / "recovery-point-offset-checkpoint").write_bytes(b"\xff\xfe")
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_damaged_files_are_reported_not_tracebacks(damaged: Path) -> None:
    part = damaged / "t-0"
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex"):
        run("dump-log", "--files", str(part / name), "--index-sanity-check")
        run("dump-log", "--files", str(part / name), "--verify-index-only")
    run("dump-log", "--files", str(part / "00000000000000000000.log"), "--deep-iteration")
    code, out = run("verify", "--log-dirs", str(damaged))
    assert code == 1
    assert "leader-epoch-checkpoint" in out and "recovery-point-offset-checkpoint" in out


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "--log-dirs", "{d}", "--topic", "missing"],
        ["consume", "--log-dirs", "{d}/nowhere", "--topic", "t"],
        ["topics", "--log-dirs", "{d}", "--create", "--topic", "bad/name", "--partitions", "1"],
        ["topics", "--log-dirs", "{d}", "--create", "--topic", "x", "--partitions", "0"],
        ["topics", "--log-dirs", "{d}", "--create", "--topic", "x", "--config", "segment.bytes=-1"],
        ["topics", "--log-dirs", "{d}", "--delete", "--topic", "missing"],
        ["dump-log", "--files", "{d}/nowhere.log"],
        ["recover", "{d}/nowhere-0"],
        ["recover", "{d}"],
        ["perf", "produce", "--log-dirs", "{d}", "--topic", "t", "--num-records", "-1",
         "--record-size", "10"],
    ],
)  # fmt: skip
def test_wrong_arguments_are_errors_not_tracebacks(tmp_path: Path, args: list[str]) -> None:
    with LogManager(tmp_path) as m:
        m.create_topic("t", 1)[0].append([Record(b"x")])
    code, _ = run(*[a.replace("{d}", str(tmp_path)) for a in args])
    assert code != 0
