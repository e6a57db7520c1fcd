"""The exporter's pipeline as batch jobs: history reports and fleet scans.

`exporter.spark.report` is the in-process (pandas) reference of the history job and imports no
Spark; the modules that need pyspark import it lazily so the daemon never pays for it.
"""
