"""``format("kafkalog")`` over a broker's files against Spark's own ``format("kafka")`` over the
running broker: the same query must give the same DataFrame, column for column.

The connector's side ran while the broker was up (tests/spark_connector.py, in its own process
with ``spark-sql-kafka-0-10`` from Maven Central); here the same queries run through kafkalog's
source over a copy of the stopped broker's log directory. Covered: every codec with headers, a
compacted and a retention-trimmed topic, subscribePattern, assign with JSON offsets (-2/-1),
timestamps, transactions under both isolation levels, two refusals, and Trigger.AvailableNow
streams with and without maxOffsetsPerTrigger (the rows of each micro-batch compared too).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")

from kafka_scenarios import BrokerWritten
from spark_connector import QUERIES, run_query

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# What each refusal must name in kafkalog's message (Spark's says it in its own words).
REFUSALS = {
    "batch starting at latest is refused": ("startingOffsets", "latest"),
    "batch ending at earliest is refused": ("endingOffsets", "earliest"),
}


def _describe(rows: list[tuple[Any, ...]]) -> str:
    return "\n".join(repr(r) for r in rows[:5])


@pytest.mark.parametrize("name", list(QUERIES))
def test_kafkalog_source_equals_sparks_kafka_connector(
    written: BrokerWritten, spark: Any, tmp_path: Path, name: str
) -> None:
    theirs = written.connector[name]
    data = Path(shutil.copytree(written.data_dir, tmp_path / "data"))
    ours = run_query(spark, "kafkalog", {"path": str(data)}, name, tmp_path / "checkpoints")
    if name in REFUSALS:
        assert theirs[0] == "refused", f"Spark's connector accepted {name!r}"
        assert ours[0] == "refused", f"kafkalog accepted {name!r}"
        for word in REFUSALS[name]:
            assert word in ours[1], ours[1]
        return
    assert theirs[0] != "refused", theirs[1]
    assert ours[0] != "refused", ours[1]
    assert ours[0] == theirs[0], "schemas differ"
    assert len(theirs[1]) > 0, f"the connector read nothing for {name!r}"
    only_theirs = sorted(set(theirs[1]) - set(ours[1]), key=repr)
    only_ours = sorted(set(ours[1]) - set(theirs[1]), key=repr)
    assert not only_theirs and not only_ours, (
        f"{len(theirs[1])} rows from the connector, {len(ours[1])} from kafkalog\n"
        f"only the connector's:\n{_describe(only_theirs)}\nonly kafkalog's:\n{_describe(only_ours)}"
    )
    assert ours[1] == theirs[1]  # and no duplicates on either side
    if len(theirs) == 3:
        assert ours[2] == theirs[2], "micro-batches differ (rows per batch)"


def test_the_connector_is_the_installed_pysparks_or_the_newest_published(
    written: BrokerWritten,
) -> None:
    import pyspark

    from spark_connector import connector_version

    assert written.connector["connector"] == connector_version()
    installed = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    used = tuple(int(x) for x in str(written.connector["connector"]).split(".")[:2])
    assert used[0] == installed[0] and used <= installed
