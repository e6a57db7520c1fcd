"""Build (or join) the SparkSession the jobs run on.

Under `spark-submit` a session already exists and its master wins; run directly, the jobs embed
Spark with `local[*]` unless `--master` says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
APP_NAME = "kafka-txn-exporter"

BASE_CONFIG: Mapping[str, str] = {
    # Partition values are cluster names and dates: strings, never inferred as numbers/dates.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


def get_session(
    master: str | None = None,
    config: Mapping[str, str] | None = None,
    app_name: str = APP_NAME,
) -> SparkSession:
    # Python workers must be this interpreter (the venv that has `exporter` installed), not
    # whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif SparkSession.getActiveSession() is None and not _submitted():
        builder = builder.master(DEFAULT_MASTER)
    for key, value in {**BASE_CONFIG, **(config or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in BASE_CONFIG.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)  # also on a session spark-submit created
    return spark


def _submitted() -> bool:
    """True under spark-submit/pyspark shell, which pass the master through the environment."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_MASTER" in os.environ
