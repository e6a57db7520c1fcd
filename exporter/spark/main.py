"""Driver program for `spark-submit`: the same jobs as `kafka-txn-exporter spark ...`.

    spark-submit --master spark://host:7077 "$(python -m exporter.spark.main --path)" scan ...

spark-submit wants a Python file, not a console script; this is that file. The driver's Python
(PYSPARK_DRIVER_PYTHON) must have the exporter installed; the executors get its code from the
session (`exporter.spark.session.ship_package`).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv == ["--path"]:
        print(Path(__file__).resolve())
        return 0
    from exporter.spark.cli import run_spark

    return run_spark(argv)


if __name__ == "__main__":
    # Run as a file, Python puts this directory first on sys.path, where `cli.py`, `report.py`
    # ... would shadow top-level modules of the same names. Import the package instead.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(here)]
    raise SystemExit(main(sys.argv[1:]))
