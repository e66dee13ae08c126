"""kafkalog on Spark: the ``kafkalog`` data source (batch and streaming reads, a sink).

import kafkalog.spark
spark = kafkalog.spark.local_session()          # or your own SparkSession
kafkalog.spark.register(spark)
df = spark.read.format("kafkalog").option("path", "data").option("subscribe", "clicks").load()
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def register(spark: Any) -> None:
    """Register the ``kafkalog`` format with a SparkSession (once per session)."""
    from kafkalog.spark.datasource import KafkaLogDataSource

    spark.dataSource.register(KafkaLogDataSource)


def local_session(app_name: str = "kafkalog", master: str = "local[2]", **conf: str) -> Any:
    """A local SparkSession whose Python workers run this interpreter (so they import the
    same kafkalog, with the driver's KAFKALOG_PURE_PYTHON), quiet and small enough for a
    laptop; ``conf`` adds Spark settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):  # one machine: bind loopback, so Spark need not warn that
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the hostname resolves to it
    quiet = Path(__file__).with_name("log4j2-quiet.properties")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={quiet.as_uri()}")
    )
    pure = os.environ.get("KAFKALOG_PURE_PYTHON")
    if pure is not None:  # the workers choose their codec as this process did
        builder = builder.config("spark.executorEnv.KAFKALOG_PURE_PYTHON", pure)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


__all__ = ["local_session", "register"]
