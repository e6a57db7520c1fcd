"""A simulated Kafka cluster that speaks the real wire protocol on 127.0.0.1.

The test rig and demo of kafka-txn-exporter, shipped as its own distribution (`kafka-txn-sim`)
so that the exporter's wheel and container image carry none of it.
"""

__version__ = "0.1.0"

from kafka_sim.cluster import SimCluster, SimTls

__all__ = ["SimCluster", "SimTls", "__version__"]
