"""Config keys declared once each -- Kafka name, type, default, validator, doc -- and Java
``.properties`` files read as Kafka reads them (Kafka's ConfigDef and Utils.loadProps).

Why: a key's name, default and bounds written in two places drift apart (a key table beside
dataclass defaults did). Here each config class declares every key as one ``define(...)`` field;
``ConfigDef.of(cls)`` collects them, parses values by Kafka's types (``ConfigDef.Type``) and
validators, and renders them back. Refuses: unknown keys (the caller says what to do with
them), silent coercion (``"1.5"`` is not an INT, ``"yes"`` not a BOOLEAN), and reading a file
other than as ISO-8859-1, which is what ``java.util.Properties.load(InputStream)`` does.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.types import INT32_MAX, INT64_MAX

_CONFIG_KEY = "kafkalog.config_key"
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")


class Type(enum.Enum):
    """Kafka's ConfigDef.Type (the ones kafkalog's keys use)."""

    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"


Validator = Callable[[str, Any], Any]  # (key, typed value) -> the value to keep


@dataclass(frozen=True)
class ConfigKey:
    """One key: what ``define`` declared, plus the attribute it fills."""

    name: str
    type: Type
    default: Any
    validator: Validator | None
    doc: str
    attribute: str = ""

    def parse(self, value: Any) -> Any:
        if value is None and self.default is None:
            return None  # a key with no default may be unset (Kafka's null)
        typed = _parse_type(self.name, self.type, value)
        return typed if self.validator is None else self.validator(self.name, typed)


def define(
    name: str, type_: Type, default: Any, doc: str, validator: Validator | None = None
) -> Any:
    """A dataclass field that is also config key ``name`` (its default is the field's)."""
    key = ConfigKey(name, type_, default, validator, doc)
    return dataclasses.field(default=default, metadata={_CONFIG_KEY: key})


class ConfigDef:
    """The keys a config class declared with ``define``, by Kafka name."""

    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self.keys = {k.name: k for k in keys}

    @classmethod
    def of(cls, config_class: type) -> ConfigDef:
        return cls(
            dataclasses.replace(f.metadata[_CONFIG_KEY], attribute=f.name)
            for f in dataclasses.fields(config_class)
            if _CONFIG_KEY in f.metadata
        )

    def parse(self, props: Mapping[str, Any], *, unknown: str) -> dict[str, Any]:
        """attribute -> parsed value for every key in ``props``; an unknown key is an
        InvalidConfigError whose message is ``unknown``."""
        check_mapping("config", props)
        values: dict[str, Any] = {}
        for name, value in props.items():
            key = self.keys.get(name)
            if key is None:
                raise InvalidConfigError(name, unknown)
            values[key.attribute] = key.parse(value)
        return values

    def render(self, config: Any) -> dict[str, str]:
        """Kafka name -> value as a ``.properties`` file or DescribeConfigs shows it; a key
        with no value (an unset ``internal.`` one) is left out, as Kafka leaves out nulls."""
        values = {name: getattr(config, k.attribute) for name, k in self.keys.items()}
        return {name: render(v) for name, v in values.items() if v is not None}


# --- types (ConfigDef.parseType) ---------------------------------------------------------------


def _parse_type(key: str, type_: Type, value: Any) -> Any:
    if type_ is Type.BOOLEAN:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise InvalidConfigError(key, f"expected true or false, got {value!r}")
    if type_ in (Type.INT, Type.LONG):
        if isinstance(value, bool | float) or not (
            isinstance(value, int) or _JAVA_INTEGER.fullmatch(str(value).strip())
        ):  # what Long.parseLong takes: no "1_000", no "1e3", no "0x10"
            raise InvalidConfigError(key, f"expected an integer, got {value!r}")
        n = int(str(value).strip())
        top = INT32_MAX if type_ is Type.INT else INT64_MAX
        if not -top - 1 <= n <= top:
            raise InvalidConfigError(key, f"{n} does not fit a Java {type_.value}")
        return n
    if type_ is Type.DOUBLE:
        if isinstance(value, bool):
            raise InvalidConfigError(key, f"expected a number, got {value!r}")
        try:
            x = float(str(value).strip()) if not isinstance(value, int | float) else value
        except ValueError:
            raise InvalidConfigError(key, f"expected a number, got {value!r}") from None
        if math.isnan(x):  # every range check would pass it
            raise InvalidConfigError(key, f"expected a number, got {value!r}")
        return x
    if type_ is Type.LIST:
        items = (
            value if isinstance(value, list | tuple | set | frozenset) else str(value).split(",")
        )
        return [str(item).strip() for item in items if str(item).strip()]
    return value if isinstance(value, enum.Enum) else str(value)


# --- validators (ConfigDef.Range, ValidString, ValidList) -------------------------------------


def at_least(low: int | float) -> Validator:
    return between(low, None)


def between(low: int | float | None, high: int | float | None) -> Validator:
    def check(key: str, value: Any) -> Any:
        if (low is not None and value < low) or (high is not None and value > high):
            shown = f"[{'...' if low is None else low}, {'...' if high is None else high}]"
            raise InvalidConfigError(key, f"{value} is outside {shown}")
        return value

    return check


def one_of(*options: str) -> Validator:
    def check(key: str, value: Any) -> Any:
        if value not in options:
            raise InvalidConfigError(key, f"{value!r} is not one of {', '.join(options)}")
        return value

    return check


def all_of(*validators: Validator) -> Validator:
    def check(key: str, value: Any) -> Any:
        for validator in validators:
            value = validator(key, value)
        return value

    return check


# --- files --------------------------------------------------------------------------------------


def load_properties(path: str | Path) -> dict[str, str]:
    """A Java ``.properties`` file exactly as ``Properties.load(InputStream)`` reads it:
    ``key=value``, ``key: value`` and ``key value``, ``#``/``!`` comments, backslash line
    continuations and escapes (``\\uXXXX`` included), ISO-8859-1 bytes. The last of a repeated
    key wins, as in Java."""
    file = Path(path)
    try:
        with file.open("rb") as fp:
            import javaproperties  # noqa: PLC0415 (it brings xml, email and urllib: ~50 ms)

            return dict(javaproperties.load(fp))
    except OSError as err:
        raise InvalidConfigError(str(file), f"cannot read the properties file: {err}") from err
    except ValueError as err:  # a malformed \uXXXX escape, as Java's IllegalArgumentException
        raise InvalidConfigError(str(file), f"malformed properties file: {err}") from err


def check_mapping(what: str, props: object) -> None:
    if not isinstance(props, Mapping):
        raise InvalidConfigError(what, f"must be a mapping of keys to values, not {props!r}")


def render(value: Any) -> str:
    if value is None:
        return "null"  # as Java prints a null default (String.valueOf)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and math.isinf(value):
        return "1.7976931348623157E308"  # Double.MAX_VALUE, Kafka's "no limit"
    if isinstance(value, frozenset | set):
        return ",".join(sorted(str(v) for v in value))
    if isinstance(value, list | tuple):  # a LIST keeps its order (the assignors' is a choice)
        return ",".join(str(v) for v in value)
    display = getattr(value, "display_name", None)
    return str(display) if display is not None else str(value)
