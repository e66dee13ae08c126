"""The ``kafkalog`` PySpark data source: what ``format("kafkalog")`` names.

Why: Spark asks one object for the schema, the readers and the writers; it sits above the
source and the sink so neither imports the other. Refuses: any reading or writing of its own.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from kafkalog.spark.options import parse_read_options
from kafkalog.spark.schema import kafka_schema
from kafkalog.spark.sink import KafkaLogBatchWriter, KafkaLogStreamWriter
from kafkalog.spark.source import KafkaLogBatchReader, KafkaLogStreamReader, check_schema


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafkalog").option("path", LOG_DIRS).option("subscribe", T)``."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def _include_headers(self) -> bool:
        value = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(value).lower() == "true"

    def schema(self) -> StructType:
        return kafka_schema(self._include_headers())

    def reader(self, schema: StructType) -> KafkaLogBatchReader:
        opts = parse_read_options(self.options, streaming=False)
        check_schema(schema, opts.include_headers)
        return KafkaLogBatchReader(opts)

    def streamReader(self, schema: StructType) -> KafkaLogStreamReader:
        opts = parse_read_options(self.options, streaming=True)
        check_schema(schema, opts.include_headers)
        return KafkaLogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaLogBatchWriter:
        return KafkaLogBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaLogStreamWriter:
        return KafkaLogStreamWriter(dict(self.options), schema, overwrite)
