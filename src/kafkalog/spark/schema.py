"""The Spark schema of Kafka records, as Spark's Kafka connector declares it.

Why: the source produces it, the sink checks its input against it and the data source reports
it; one module, below all three, keeps them from importing each other. Built without a session
(executors have none). Refuses: anything but types.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Spark's Kafka connector: headers are array<struct<key: string, value: binary>>
SPARK_HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
    containsNull=True,
)
_KAFKA_FIELDS = [
    ("key", BinaryType()),
    ("value", BinaryType()),
    ("topic", StringType()),
    ("partition", IntegerType()),
    ("offset", LongType()),
    ("timestamp", TimestampType()),
    ("timestampType", IntegerType()),
]


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, with the ``headers`` column when ``includeHeaders``."""
    fields = [StructField(name, dtype, True) for name, dtype in _KAFKA_FIELDS]
    if include_headers:
        fields.append(StructField("headers", SPARK_HEADERS_TYPE, True))
    return StructType(fields)
