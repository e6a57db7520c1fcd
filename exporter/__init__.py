"""kafka-txn-exporter: finds late and hanging Kafka transactions (KIP-664) for Prometheus."""

__version__ = "0.1.0"
