"""Collect: talk to one cluster's brokers and turn one poll into a `ClusterObservation`."""

from exporter.collect.connection import (
    AuthenticationFailed,
    BrokerUnreachable,
    CollectError,
    DecodeError,
    RequestTimeout,
    UnsupportedApi,
)
from exporter.collect.poll import ClusterPoller

__all__ = [
    "AuthenticationFailed",
    "BrokerUnreachable",
    "ClusterPoller",
    "CollectError",
    "DecodeError",
    "RequestTimeout",
    "UnsupportedApi",
]
