"""Collect: talk to one cluster's brokers and turn one poll into a `ClusterObservation`."""

from exporter.collect._kafka_package import register_lazy_packages

register_lazy_packages()  # before any kafka module below: see _kafka_package

from exporter.collect.connection import (  # noqa: E402
    AuthenticationFailed,
    BrokerUnreachable,
    CollectError,
    DecodeError,
    RequestTimeout,
    UnsupportedApi,
)
from exporter.collect.poll import ClusterPoller  # noqa: E402

__all__ = [
    "AuthenticationFailed",
    "BrokerUnreachable",
    "ClusterPoller",
    "CollectError",
    "DecodeError",
    "RequestTimeout",
    "UnsupportedApi",
]
