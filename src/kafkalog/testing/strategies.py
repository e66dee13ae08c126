"""Hypothesis strategies for records and batches, shared by kafkalog's tests and its users'."""

from __future__ import annotations

from hypothesis import strategies as st

from kafkalog.records.record import Record
from kafkalog.types import CompressionType

CODECS = tuple(CompressionType)


def codecs_for(magic: int) -> tuple[CompressionType, ...]:
    return CODECS if magic == 2 else tuple(c for c in CODECS if c is not CompressionType.ZSTD)


payloads = st.one_of(st.none(), st.binary(max_size=64), st.binary(min_size=200, max_size=3000))
header_keys = st.text(max_size=12)
headers = st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=16))), max_size=4)
timestamps = st.one_of(st.none(), st.integers(min_value=0, max_value=2**50))


@st.composite
def records(draw: st.DrawFn, magic: int = 2, max_size: int = 20) -> list[Record]:
    """Records valid for ``magic``: no headers before v2, no timestamps in v0."""
    n = draw(st.integers(min_value=1, max_value=max_size))
    out = []
    for _ in range(n):
        out.append(
            Record(
                draw(payloads),
                key=draw(payloads),
                headers=draw(headers) if magic == 2 else (),
                timestamp=draw(timestamps) if magic > 0 else None,
            )
        )
    return out
