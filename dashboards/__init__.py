"""Grafana dashboards and Prometheus alert rules for kafka-txn-exporter (see generate.py)."""
