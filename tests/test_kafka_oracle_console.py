"""``kafkalog produce`` parses lines into the records Kafka's console producer makes.

Each case's bytes go through Kafka's own ``LineMessageReader`` (interop/LineReaderOracle.java)
and through kafkalog's; both print every record (key, value, headers) and the error that stops
the reader, which must match word for word: separators, ``null.marker``, ``ignore.error``,
CRLF and CR line ends, non-ASCII separators, bytes that are not UTF-8, colliding separators.
"""

from __future__ import annotations

import io
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from kafka_oracle import JVM_FLAGS, KAFKA_VERSIONS, ROOT, classpath
from kafkalog.cli.console import parse_properties
from kafkalog.cli.line_reader import LineMessageReader, lines
from kafkalog.errors import InvalidArgumentError

pytestmark = [pytest.mark.kafka, pytest.mark.one_codec]

KEYED = ("parse.key=true", "key.separator=|")
HEADERS = ("parse.headers=true", *KEYED, "null.marker=NULL")
CASES: dict[str, tuple[tuple[str, ...], bytes]] = {
    "line ends": ((), b"a\nb\r\nc\rd\n\ne"),
    "key": (KEYED, b"k1|v1\n|empty key\nk2|v|with|bars\r\n"),
    "no key separator": (KEYED, b"k1|v1\nno separator here\nk3|v3\n"),
    "ignore.error": ((*KEYED, "ignore.error=TRUE "), b"k1|v1\nno separator\n"),
    "null.marker": (HEADERS, b"h:1\tNULL|v\nNULL\tk|NULL\nh:NULL,g:2\tNULL|NULL\n"),
    "header without ':'": (HEADERS, b"a:1,b\tk|v\n"),
    "header without ':' ignored": ((*HEADERS, "ignore.error=true"), b"a:1,b\tk|v\n"),
    "null header key": (HEADERS, b"NULL:1\tk|v\n"),
    "empty headers": (HEADERS, b"\tk|v\n"),
    "only header separators": (HEADERS, b",,\tk|v\n"),
    "non-ASCII": (
        (
            "parse.headers=true",
            "parse.key=true",
            "key.separator=→",
            "headers.separator=¦",
            "headers.key.separator=\u2261",  # ≡
            "headers.delimiter=§",
        ),
        "ключ\u2261знач\u0435ни\u0435¦b\u2261🙂§k→v→w\n".encode(),  # noqa: RUF001
    ),
    "not UTF-8": ((), b"ok\n\xff\xfebad\nend\n"),
    "delimiter is separator": (("parse.headers=true", "headers.separator=\t"), b"x\n"),
    "null.marker is key.separator": ((*KEYED, "null.marker=|"), b"x\n"),
}


def kafkalog_output(props: tuple[str, ...], data: bytes) -> str:
    out = []

    def hex_or_null(b: bytes | None) -> str:
        return "null" if b is None else "x" + b.hex()

    try:
        reader = LineMessageReader.from_properties(parse_properties(props))
        for number, line in enumerate(lines(io.BytesIO(data)), start=1):
            r = reader.record(line, number, 0)
            heads = "".join(f"{hex_or_null(k.encode())}={hex_or_null(v)}," for k, v in r.headers)
            out.append(f"record\t{hex_or_null(r.key)}\t{hex_or_null(r.value)}\t{heads}")
    except InvalidArgumentError as e:
        out.append(f"error\t{e}")
    return "\n".join(out) + "\n"


def kafka_output(version: str, props: tuple[str, ...], data: bytes) -> str:
    program = str(ROOT / "interop/LineReaderOracle.java")
    cmd = ["java", *JVM_FLAGS, "-cp", classpath(version), program]
    proc = subprocess.run([*cmd, *props], input=data, capture_output=True, timeout=300, check=True)
    return proc.stdout.decode()


@pytest.fixture(scope="module")
def kafkas_records() -> dict[str, str]:
    version = KAFKA_VERSIONS[-1]  # LineMessageReader is Java (org.apache.kafka.tools) since 3.7
    classpath(version)
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(kafka_output, version, *case) for name, case in CASES.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", CASES)
def test_lines_become_kafkas_records(name: str, kafkas_records: dict[str, str]) -> None:
    props, data = CASES[name]
    assert kafkalog_output(props, data) == kafkas_records[name]
