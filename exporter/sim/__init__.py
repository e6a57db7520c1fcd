"""A simulated Kafka cluster that speaks the real wire protocol on 127.0.0.1 (tests and demo)."""

from exporter.sim.cluster import SimCluster, SimTls

__all__ = ["SimCluster", "SimTls"]
