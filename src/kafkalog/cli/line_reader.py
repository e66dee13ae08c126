"""The console producer's line parser: Kafka's ``LineMessageReader``, property for property.

Why: people pipe the same files into ``kafka-console-producer`` and ``kafkalog produce``, so a
line must become the same record in both: headers first (``parse.headers``), then the key
(``parse.key``), then the value; ``null.marker`` makes a key, value or header value null; a
missing separator is an error naming the line number unless ``ignore.error`` is true. Lines
end at ``\\n``, ``\\r\\n`` or ``\\r`` and are UTF-8, as Java's ``BufferedReader`` reads them.
Refuses: separators that collide (Kafka refuses the same pairs), a header key equal to the
null marker (header keys cannot be null).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from kafkalog.errors import InvalidArgumentError
from kafkalog.records import Record


def _flag(props: Mapping[str, str], name: str) -> bool:
    return props.get(name, "").strip().lower() == "true"


@dataclass(frozen=True)
class LineMessageReader:
    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    ignore_error: bool = False
    null_marker: str | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LineMessageReader:
        """The reader Kafka's ``--property`` values configure; unknown properties are ignored,
        as Kafka ignores them."""
        reader = cls(
            parse_key=_flag(props, "parse.key"),
            key_separator=props.get("key.separator", "\t"),
            parse_headers=_flag(props, "parse.headers"),
            headers_delimiter=props.get("headers.delimiter", "\t"),
            headers_separator=props.get("headers.separator", ","),
            headers_key_separator=props.get("headers.key.separator", ":"),
            ignore_error=_flag(props, "ignore.error"),
            null_marker=props.get("null.marker"),
        )
        reader._check_separators()
        return reader

    def _check_separators(self) -> None:
        named = {
            "headers.delimiter": self.headers_delimiter,
            "headers.separator": self.headers_separator,
            "headers.key.separator": self.headers_key_separator,
        }
        pairs = [(a, b) for i, a in enumerate(named) for b in list(named)[i + 1 :]]
        for a, b in pairs:
            if named[a] == named[b]:
                raise InvalidArgumentError(f"{a} and {b} may not be equal")
        if self.null_marker is not None:
            for name, value in {"key.separator": self.key_separator, **named}.items():
                if value == self.null_marker:
                    raise InvalidArgumentError(f"null.marker and {name} may not be equal")

    def record(self, line: str, line_number: int, timestamp: int) -> Record:
        """The record for one line (without its terminator); ``line_number`` counts from 1."""
        headers_text = self._field(self.parse_headers, line, 0, self.headers_delimiter,
                                   "headers delimiter", line_number)  # fmt: skip
        header_end = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key_text = self._field(self.parse_key, line, header_end, self.key_separator,
                               "key separator", line_number)  # fmt: skip
        key_end = 0 if key_text is None else len(key_text) + len(self.key_separator)
        value_text = line[header_end + key_end :]
        headers: list[tuple[str, bytes | None]] = []
        if headers_text is not None and headers_text != self.null_marker:
            headers = self._headers(headers_text, line_number)
        return Record(
            self._bytes(value_text),
            self._bytes(key_text),
            headers,
            timestamp=timestamp,
        )

    def _bytes(self, text: str | None) -> bytes | None:
        if text is None or text == self.null_marker:
            return None
        return text.encode()

    def _field(
        self, enabled: bool, line: str, start: int, demarcation: str, name: str, line_number: int
    ) -> str | None:
        if not enabled:
            return None
        index = line.find(demarcation, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise InvalidArgumentError(f"No {name} found on line number {line_number}: '{line}'")
        return line[start:index]

    def _headers(self, text: str, line_number: int) -> list[tuple[str, bytes | None]]:
        headers: list[tuple[str, bytes | None]] = []
        # as Java's String.split(regex): with a match, trailing empty strings are dropped
        pieces = re.split(self.headers_separator, text)
        while len(pieces) > 1 and pieces[-1] == "":
            pieces.pop()
        if pieces == [""] and text:
            pieces = []
        for pair in pieces:
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if self.ignore_error:
                    headers.append((pair, None))
                    continue
                raise InvalidArgumentError(
                    f"No header key separator found in pair '{pair}' on line number {line_number}"
                )
            if key == self.null_marker:
                raise InvalidArgumentError(
                    f"Header keys should not be equal to the null marker '{self.null_marker}' "
                    "as they can't be null"
                )
            headers.append((key, None if value == self.null_marker else value.encode()))
        return headers


def lines(stream: BinaryIO) -> Iterator[str]:
    """Lines of UTF-8 text ending at ``\\n``, ``\\r\\n`` or ``\\r``, without their terminators;
    bytes that are not UTF-8 become U+FFFD, as Java's reader decodes them."""
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
    try:
        for line in text:
            yield line[:-1] if line.endswith("\n") else line
    finally:
        text.detach()
