"""The consumer configs ``consume`` takes (``--consumer-property``, ``--consumer.config`` and
Kafka 4's ``--command-property``, ``--command-config``), and its formatter's settings.

Why: people pass kafka-console-consumer the configs they give a Java consumer. Three mean
something for a reader of files: ``group.id`` (as ``--group``), ``isolation.level`` and
``auto.offset.reset``; they are resolved with ConsoleConsumerOptions' rules (the same group in
every place it is given, ``--isolation-level`` over the configs, ``auto.offset.reset`` against
``--from-beginning``). The rest, network settings mostly, are named in one warning rather than
silently dropped. Refuses: formatter classes other than Kafka's DefaultMessageFormatter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import click

from kafkalog.config_def import load_properties
from kafkalog.errors import InvalidArgumentError

DEFAULT_FORMATTERS = (
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter",  # Kafka 4
    "kafka.tools.DefaultMessageFormatter",  # Kafka 3
)
HONOURED = ("group.id", "isolation.level", "auto.offset.reset")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
OFFSET_RESETS = ("earliest", "latest")


@dataclass(frozen=True)
class ConsumerSettings:
    group: str | None = None
    isolation_level: str = "read_uncommitted"
    auto_offset_reset: str = "latest"
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def resolve(
        cls,
        config_file: str | None,
        props: Mapping[str, str],
        group: str | None,
        isolation_level: str | None,
        from_beginning: bool,
    ) -> ConsumerSettings:
        """The settings of a console consumer from its config file, then ``props`` over it,
        and the command's own options, by ConsoleConsumerOptions' rules."""
        from_file = load_properties(config_file) if config_file is not None else {}
        merged = {**from_file, **props}
        groups = [g for g in (group, from_file.get("group.id"), props.get("group.id")) if g]
        if len(set(groups)) > 1:
            detected = ", ".join(f"'{g}'" for g in dict.fromkeys(groups))
            raise click.UsageError(
                "The group ids provided in different places (directly using '--group', via "
                "'--consumer-property', or via '--consumer.config') do not match. Detected "
                f"group ids: {detected}"
            )
        level = isolation_level or merged.get("isolation.level", "read_uncommitted")
        if level not in ISOLATION_LEVELS:
            raise InvalidArgumentError(
                f"Invalid value {level} for configuration isolation.level: String must be one "
                f"of: {', '.join(ISOLATION_LEVELS)}"
            )
        reset = merged.get("auto.offset.reset")
        if reset is not None and from_beginning and reset != "earliest":
            raise click.UsageError(
                f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', "
                "please remove one option"
            )
        reset = reset or ("earliest" if from_beginning else "latest")
        if reset not in OFFSET_RESETS:
            raise InvalidArgumentError(
                f"Invalid value {reset} for configuration auto.offset.reset: kafkalog's consume "
                f"takes {' or '.join(OFFSET_RESETS)}"
            )
        ignored = sorted(set(merged) - set(HONOURED))
        warnings = []
        if ignored:
            warnings.append(
                "WARN kafkalog reads local files, so these consumer configs have no effect: "
                + ", ".join(ignored)
            )
        return cls(groups[0] if groups else None, level, reset, warnings)


def formatter_properties(
    formatter_class: str | None, config_file: str | None, props: Mapping[str, str]
) -> dict[str, str]:
    """The formatter's properties: the ``--formatter-config`` file, then ``props`` over it
    (Kafka's precedence). Only Kafka's DefaultMessageFormatter can be named."""
    if formatter_class is not None and formatter_class not in DEFAULT_FORMATTERS:
        raise click.UsageError(
            f"--formatter {formatter_class}: kafkalog prints with Kafka's DefaultMessageFormatter "
            f"only ({DEFAULT_FORMATTERS[0]})"
        )
    from_file = load_properties(config_file) if config_file is not None else {}
    return {**from_file, **props}
