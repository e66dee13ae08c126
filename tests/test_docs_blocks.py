"""Every shell and Python block of the README and of ``docs/`` runs as written.

A newcomer copies these blocks first; a block that fails is the first thing they meet. Each
file's blocks run in order in one temporary directory (a later block may use what an earlier
one made), Python blocks of a file in one namespace; a Python block whose first line is
indented continues the block before it (the README shows a ``with`` body in two pieces). Shell
blocks run line by line (a trailing backslash continues a line) under bash with ``kafkalog`` and,
where a block calls them, Kafka 4.3.1's own tools on PATH (``kafka-*.sh`` run the classes of
``make kafka-oracle``'s jars). A ``kafkalog serve`` line starts the server in the background on a
free port, which replaces the block's ``:9092`` in every line; the server stops at the block's
end. Any non-zero exit or Python traceback fails the test.

An HTML comment on the lines just above a fence tells the harness what a reader need not see:
``<!-- doc-test: setup: CMD -->`` runs CMD first; ``stdin: TEXT`` feeds each command TEXT;
``waits: WORDS`` marks the command containing WORDS as one that runs until stopped (it must
still be running after a few seconds, or have exited 0); ``fails: TEXT`` says the block is meant
to fail and must print TEXT; ``skip: WHY`` leaves a block out, saying why.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafka_oracle import free_port, write_scripts

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_TIMEOUT = 120  # seconds for one command (a Spark block starts a JVM)
WAITS_FOR = 3.0  # seconds a `waits:` command must keep running


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    text: str
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(sh|python)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        notes: dict[str, str] = {}
        j = i - 1
        while j >= 0 and (note := re.match(r"^<!-- doc-test: (\w+): (.*) -->$", lines[j])):
            notes.setdefault(note.group(1), note.group(2))
            j -= 1
        end = lines.index("```", i + 1)
        found.append(Block(path, i + 1, fence.group(1), "\n".join(lines[i + 1 : end]), notes))
        i = end + 1
    return found


def _documents() -> list[Path]:
    return [p for p in DOCS if any(b.lang in ("sh", "python") for b in blocks_of(p))]


def _commands(text: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


class Runner:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        bindir = workdir.parent / "bin"
        bindir.mkdir(exist_ok=True)
        self.env = dict(
            os.environ,
            PATH=f"{bindir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
            + os.environ["PATH"],
            PYTHONUNBUFFERED="1",
        )
        self.bindir = bindir
        self.namespace_source: list[str] = []
        self.python_blocks: list[tuple[Block, str]] = []

    def shell(self, block: Block) -> None:
        if "setup" in block.notes:
            self._check(
                block,
                "setup",
                subprocess.run(
                    ["bash", "-c", block.notes["setup"]],
                    cwd=self.workdir,
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT,
                    check=False,
                ),
            )
        if "kafka-" in block.text:
            write_scripts("4.3.1", self.bindir)
        port = free_port()
        server: subprocess.Popen[bytes] | None = None
        try:
            for command in _commands(block.text):
                command = command.replace(":9092", f":{port}")
                if command.startswith("kafkalog serve"):
                    server = self._serve(block, command, port)
                    continue
                self._one(block, command)
        finally:
            if server is not None:
                server.send_signal(signal.SIGTERM)
                server.wait(60)

    def _serve(self, block: Block, command: str, port: int) -> subprocess.Popen[bytes]:
        command = command.split("  #", maxsplit=1)[0].rstrip()  # the comment aligned after it
        if "listeners=" not in command:
            command += f" --override listeners=PLAINTEXT://127.0.0.1:{port}"
        command = command.replace("0.0.0.0", "127.0.0.1")
        server = subprocess.Popen(["bash", "-c", "exec " + command], cwd=self.workdir, env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert server.poll() is None, f"{block.where}: {command!r} exited {server.returncode}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return server
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"{block.where}: {command!r} did not listen in 60 s")

    def _one(self, block: Block, command: str) -> None:
        stdin = block.notes.get("stdin", "").replace("\\n", "\n")
        waits = block.notes.get("waits")
        if waits and waits in command:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            time.sleep(WAITS_FOR)
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
                return
            out, err = proc.communicate()
            done = subprocess.CompletedProcess(command, proc.returncode, out, err)
            self._check(block, command, done)
            return
        self._check(
            block,
            command,
            subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=self.workdir,
                env=self.env,
                input=stdin.encode(),
                capture_output=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            ),
        )

    def _check(self, block: Block, what: str, done: subprocess.CompletedProcess[bytes]) -> None:
        out = done.stdout if isinstance(done.stdout, str) else done.stdout.decode(errors="replace")
        err = done.stderr if isinstance(done.stderr, str) else done.stderr.decode(errors="replace")
        expected = block.notes.get("fails")
        if expected is not None:
            assert done.returncode != 0 and expected in out + err, (
                f"{block.where}: {what!r} was meant to fail with {expected!r}:\n{out}{err}"
            )
            return
        assert done.returncode == 0 and "Traceback (most recent call last)" not in err, (
            f"{block.where}: {what!r} exited {done.returncode}:\n{out[-3000:]}{err[-3000:]}"
        )

    def python(self, block: Block) -> None:
        source = block.text
        if source[:1].isspace() and self.python_blocks:  # continues the block before it
            previous, before = self.python_blocks.pop()
            source = before + "\n" + source
            block = previous
        else:
            source = textwrap.dedent(source)
        self.python_blocks.append((block, source))

    def flush_python(self) -> None:
        """Run the Python blocks gathered so far, in one interpreter, one namespace."""
        if not self.python_blocks:
            return
        program = ["ns = {'__name__': '__main__'}"]
        for block, source in self.python_blocks:
            program.append(f"exec(compile({source!r}, {block.where!r}, 'exec'), ns)")
        first = self.python_blocks[0][0]
        where = ", ".join(b.where for b, _ in self.python_blocks)
        self.python_blocks = []
        done = subprocess.run(
            [sys.executable, "-c", "\n".join(program)],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            timeout=COMMAND_TIMEOUT * 3,
            check=False,
        )
        self._check(first, f"the Python of {where}", done)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.one_codec
@pytest.mark.parametrize("doc", _documents(), ids=lambda p: p.name)
def test_every_block_runs_as_written(doc: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    runner = Runner(workdir)
    for block in blocks_of(doc):
        if "skip" in block.notes:
            assert block.notes["skip"].strip(), f"{block.where}: a skipped block says why"
            continue
        if block.lang == "python":
            if "setup" in block.notes:
                runner.flush_python()
                runner.shell(Block(block.path, block.line, "sh", "", block.notes))
            runner.python(block)
            continue
        runner.flush_python()  # the shell block may use what the Python before it made
        runner.shell(block)
    runner.flush_python()


def test_the_harness_reads_every_block() -> None:
    """Every sh and python fence of the docs is found, and a skipped one says why."""
    total = 0
    for doc in DOCS:
        fences = len(re.findall(r"^```(?:sh|python)\s*$", doc.read_text(), re.M))
        found = blocks_of(doc)
        assert len(found) == fences, doc
        total += fences
        for block in found:
            if "skip" in block.notes:
                assert len(block.notes["skip"]) > 10, block.where
    assert total >= 15
