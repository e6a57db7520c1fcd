"""One module per Kafka API: its request, its parser and its handler on `collect.driver`
(which owns fan-out, batching, retries, re-routing and checking an answer against its request).
"""
