"""Security tests: TLS/SASL to Kafka, TLS + basic auth on /metrics, secrets never leak."""
