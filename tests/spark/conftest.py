"""One SparkSession for all Spark tests (JVM start-up costs seconds): local[2], 2 shuffle
partitions, no UI. Stopped at the end of the test session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # histgen

if True:  # keep the import after the path tweak
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from exporter.spark.session import get_session

    session = get_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        },
        app_name="kafka-txn-exporter-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
