"""The producer configs ``perf produce`` takes (``--producer-props``, ``--producer.config``).

Why: people pass kafka-producer-perf-test the same configs they give a Java producer; the ones
that mean something for appends to a local log are honoured with the producer's validation
(``batch.size``, ``compression.type`` and KIP-390's levels), and the rest, network settings
mostly, are named in one warning rather than silently dropped. Refuses: ``transactional.id``
(perf produce runs no transactions) and values Kafka's producer would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkalog.errors import InvalidArgumentError
from kafkalog.types import CompressionType

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # ProducerConfig's values: case-sensitive
LEVELS = {"gzip": "compression.gzip.level", "lz4": "compression.lz4.level",
          "zstd": "compression.zstd.level"}  # fmt: skip


def _int(props: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = props.get(name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"Invalid value {raw} for configuration {name}: Not a number of type INT"
        ) from None
    if value < minimum:
        raise InvalidArgumentError(
            f"Invalid value {value} for configuration {name}: Value must be at least {minimum}"
        )
    return value


@dataclass(frozen=True)
class ProducerSettings:
    batch_size: int = 16384
    compression: CompressionType = CompressionType.NONE
    compression_level: int | None = None
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ProducerSettings:
        """Validate the configs as Kafka's producer does; collect what is ignored."""
        if "transactional.id" in props:
            raise InvalidArgumentError(
                "transactional.id: kafkalog perf produce runs no transactions"
            )
        codec = props.get("compression.type", "none").strip()
        if codec not in CODECS:
            raise InvalidArgumentError(
                f"Invalid value {codec} for configuration compression.type: String must be "
                f"one of: {', '.join(CODECS)}"
            )
        level = None
        if codec in LEVELS and LEVELS[codec] in props:
            level = _int(props, LEVELS[codec], 0, -(2**31))
        honoured = {"batch.size", "compression.type", *LEVELS.values()}
        ignored = sorted(set(props) - honoured)
        warnings = []
        if ignored:
            warnings.append(
                f"WARN kafkalog appends to local files, so these producer configs have no "
                f"effect: {', '.join(ignored)}"
            )
        return cls(
            batch_size=_int(props, "batch.size", 16384, 0),
            compression=CompressionType.parse(codec),
            compression_level=level,
            warnings=warnings,
        )
