"""A consumer group member that never joins: kafka-python's KafkaConsumer with `assign()` + commit.

This is how many applications (and kafka-python users) consume: they pick partitions themselves
and commit offsets under a group id with generation -1 and an empty member id, which creates a
"simple" group on the coordinator (docs/kafka-semantics.md#consumer-groups). A
`read_committed` consumer reads only up to the last stable offset, so behind a hanging
transaction it stops there and its committed offset stays at the LSO while the high watermark
moves on: what the exporter's blocked-group detection looks for.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer
from kafka.net.compat import KafkaNetClient
from kafka.structs import OffsetAndMetadata, TopicPartition

__all__ = ["ConsumedPosition", "commit_offset", "consume_and_commit", "in_process_client"]

SLOW_TASK_THRESHOLD_SECONDS = 5.0
"""kafka-python's network selector warns "Task ... ran for X s ... It is blocking the event loop
... Other pollers will time out" when one step of its I/O loop takes longer than
`slow_task_threshold_secs` (default 0.1 s). These consumers share their process with the
simulated brokers, the workload and (in the demo) the exporter, so a step is routinely held up
that long waiting for the GIL: noise, not a blocked loop (the demo printed it twice in 3
minutes). 5 s keeps the warning for a real stall, well below the consumer's request timeouts."""

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


@dataclass(frozen=True, slots=True)
class ConsumedPosition:
    """What one consume-and-commit pass did on one partition."""

    group_id: str
    topic: str
    partition: int
    records_read: int
    committed_offset: int
    end_offset: int
    """The end this consumer can see: the LSO for read_committed, else the high watermark."""


def in_process_client(**configs: Any) -> KafkaNetClient:
    """KafkaConsumer's `kafka_client` for a consumer that shares its process with the
    simulator: the slow-step warning only for a real stall (SLOW_TASK_THRESHOLD_SECONDS)."""
    return KafkaNetClient(**{**configs, "slow_task_threshold_secs": SLOW_TASK_THRESHOLD_SECONDS})


def _consumer(
    bootstrap: str | Sequence[str], group_id: str, isolation_level: str, client_id: str
) -> KafkaConsumer:
    return KafkaConsumer(
        kafka_client=in_process_client,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation_level,
        request_timeout_ms=10000,
    )


def consume_and_commit(
    bootstrap: str | Sequence[str],
    group_id: str,
    topic: str,
    partition: int,
    *,
    isolation_level: str = READ_COMMITTED,
    timeout_s: float = 10.0,
    client_id: str = "kafka-txn-sim-consumer",
) -> ConsumedPosition:
    """Assign one partition, read from the committed offset (or the start) to the end this
    isolation level sees, commit the position (OffsetCommit, generation -1) and close."""
    tp = TopicPartition(topic, partition)
    consumer = _consumer(bootstrap, group_id, isolation_level, client_id)
    try:
        consumer.assign([tp])
        end = int(consumer.end_offsets([tp])[tp])
        read = 0
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{group_id}: position {consumer.position(tp)} never reached {end} "
                    f"on {topic}-{partition}"
                )
            read += sum(len(v) for v in consumer.poll(timeout_ms=100).values())
        consumer.commit()
        committed = consumer.committed(tp)
        return ConsumedPosition(
            group_id, topic, partition, read, -1 if committed is None else int(committed), end
        )
    finally:
        consumer.close(autocommit=False)


def commit_offset(
    bootstrap: str | Sequence[str],
    group_id: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    client_id: str = "kafka-txn-sim-consumer",
) -> None:
    """Commit an offset without reading (no leader epoch, -1), as an admin or a consumer
    restoring its own position does."""
    tp = TopicPartition(topic, partition)
    consumer = _consumer(bootstrap, group_id, READ_UNCOMMITTED, client_id)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close(autocommit=False)
