"""``meta.properties``: the node and cluster a Kafka broker's log directory belongs to.

Why: a Kafka broker writes it into each log directory it formats (``kafka-storage format``):
``node.id`` (``broker.id`` before KRaft), ``cluster.id`` and, since KIP-858, ``directory.id``.
kafkalog serve takes the cluster id from it, so clients see the cluster they knew; the tools
and the manager take the node id, whose dynamic broker configs (in the metadata log) and broker
listing belong to the directory. Refuses: writing the file (kafkalog never formats a directory
as Kafka's), and a file it cannot read counts as absent, as Kafka's own tools report it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

META_PROPERTIES = "meta.properties"


def read_meta_properties(log_dirs: Iterable[Path]) -> dict[str, str]:
    """The keys of the first readable ``meta.properties`` among ``log_dirs``; {} if none.
    Java properties' ``key=value`` lines; ``#`` and ``!`` start comments."""
    for d in log_dirs:
        try:
            text = (d / META_PROPERTIES).read_text("latin-1")
        except OSError:
            continue
        props = {}
        for line in text.splitlines():
            line = line.strip()
            if line and line[0] not in "#!":
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
        return props
    return {}


def node_id(log_dirs: Iterable[Path]) -> int | None:
    """The ``node.id`` (else ``broker.id``) the directories' ``meta.properties`` names."""
    props = read_meta_properties(log_dirs)
    for key in ("node.id", "broker.id"):
        if props.get(key, "").isdigit():
            return int(props[key])
    return None
