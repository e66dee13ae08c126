"""A walk over a request's bytes, by its schema, before kio parses it: every array's declared
length must fit in the bytes that are left, and no field Kafka's schema calls non-nullable may
be sent as null.

Why: kio's native parser reserves memory for an array's declared length before reading its
elements, so one 40-byte request declaring 2^31 elements of a struct made the Rust allocator
abort the whole process (found by test_every_api_key_and_version_with_a_random_body): one
unauthenticated packet stopped every client's broker. Kafka's own parser refuses an array
longer than the bytes left (ByteBufferAccessor, MessageUtil); this walk applies the same bound
(each element takes at least one byte) and lets kio do the rest. kio reads a null where the
schema forbids one as None; Kafka's generated readers refuse it ("non-nullable field ... was
serialized as null") and the broker closes the connection, so the same walk refuses it too.

Refuses: only what cannot be a valid request (an array or string running past the frame, a
truncated field, a forbidden null); everything else is kio's to judge. Reads kio's schema
classes through ``kio.serial._introspect``, pinned with kio below 0.7.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

_FIXED = {
    "int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}  # fmt: skip
_LENGTH_PREFIXED = {"string": 2, "bytes": 4, "records": 4}  # their legacy length's size

Step = Callable[[bytes, int], int]  # (frame, position) -> the position after the field


class FrameTooShort(ValueError):
    """The frame ends, or declares more than it holds, inside a field."""


class NullNotAllowed(ValueError):
    """A field the schema calls non-nullable holds null (Kafka's readers refuse it)."""


def _refuse_null(name: str) -> None:
    raise NullNotAllowed(f"non-nullable field {name} was serialized as null")


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise FrameTooShort("a varint runs past the frame or is too long")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _need(data: bytes, pos: int, n: int) -> int:
    if n < 0 or pos + n > len(data):
        raise FrameTooShort(f"a field of {n} bytes at {pos} runs past the frame")
    return pos + n


def _count(data: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (-1: null) and the position after it, bounded by the bytes
    left: every element takes at least one."""
    if flexible:
        raw, pos = _uvarint(data, pos)
        count = raw - 1
    else:
        pos = _need(data, pos, 4)
        count = int.from_bytes(data[pos - 4 : pos], "big", signed=True)
    if count > len(data) - pos:
        raise FrameTooShort(f"an array of {count} elements at {pos} is longer than the frame")
    return count, pos


def _primitive(kafka_type: str, flexible: bool, name: str, nullable: bool) -> Step:
    if kafka_type in _FIXED:
        size = _FIXED[kafka_type]
        return lambda data, pos: _need(data, pos, size)
    prefix = _LENGTH_PREFIXED.get(kafka_type)
    if prefix is None:
        raise TypeError(f"no walk for kio type {kafka_type!r}")
    if flexible:

        def compact(data: bytes, pos: int) -> int:
            length, pos = _uvarint(data, pos)
            if length == 0 and not nullable:
                _refuse_null(name)
            return _need(data, pos, max(length - 1, 0))

        return compact

    def legacy(data: bytes, pos: int) -> int:
        pos = _need(data, pos, prefix)
        length = int.from_bytes(data[pos - prefix : pos], "big", signed=True)
        if length < 0 and not nullable:
            _refuse_null(name)
        return _need(data, pos, max(length, 0))

    return legacy


def _array(element: Step, flexible: bool, name: str, nullable: bool) -> Step:
    def walk(data: bytes, pos: int) -> int:
        count, pos = _count(data, pos, flexible)
        if count < 0 and not nullable:
            _refuse_null(name)
        for _ in range(count):
            pos = element(data, pos)
        return pos

    return walk


def _nullable(entity: Step) -> Step:
    def walk(data: bytes, pos: int) -> int:
        pos = _need(data, pos, 1)
        return pos if data[pos - 1] == 0xFF else entity(data, pos)

    return walk


def _tagged(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos = _need(data, pos, size)
    return pos


def _holds_none(annotation: Any) -> bool:
    """Whether kio's annotation lets the value be None: the schema's nullable."""
    union = typing.get_origin(annotation) in (types.UnionType, typing.Union)
    return union and type(None) in typing.get_args(annotation)


def _element_type(annotation: Any) -> Any:
    """X from an array field's ``tuple[X, ...]`` or ``tuple[X, ...] | None``."""
    if _holds_none(annotation):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_args(annotation)[0]


@cache
def entity_walk(cls: Any) -> Step:
    """The walk of one kio request (or nested) entity class."""
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[Step] = []
    for f in dataclasses.fields(cls):
        if get_field_tag(f) is not None:
            continue  # tagged fields are in the tagged-field section
        kind = classify_field(f)
        if isinstance(kind, EntityField) and is_optional(f):
            inner = _nullable(entity_walk(kind.type_))  # KIP-893: an int8 marker first
        elif isinstance(kind, EntityField | EntityTupleField):
            inner = entity_walk(kind.type_)
        else:
            held = _element_type(f.type) if kind.is_array else f.type
            inner = _primitive(f.metadata["kafka_type"], flexible, f.name, _holds_none(held))
        if kind.is_array:
            inner = _array(inner, flexible, f.name, _holds_none(f.type))
        steps.append(inner)
    if flexible:
        steps.append(_tagged)

    def walk(data: bytes, pos: int) -> int:
        for step in steps:
            pos = step(data, pos)
        return pos

    return walk


def check_frame(cls: Any, data: bytes, offset: int) -> None:
    """Raise FrameTooShort if the body of ``cls`` at ``offset`` cannot fit ``data``, and
    NullNotAllowed if it holds a null where the schema forbids one."""
    entity_walk(cls)(data, offset)
