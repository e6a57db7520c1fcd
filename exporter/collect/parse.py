"""Pure response parsers shared by `serve`, `scan` and `abort` (kafka-python's habit: the
request builders live in `collect.client`, the parsers here; neither does I/O).

Each takes a decoded response (kafka-python's or the lean one from `collect.fastdecode`, same
field names) and returns the exporter's records: `model.ProducerEntry` for DescribeProducers,
`model.TransactionDescription` for DescribeTransactions. Error codes stay codes; the caller
decides what each means for its poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.collect.errors import NONE
from exporter.model import ProducerEntry, TopicPartition, TransactionDescription


@dataclass(slots=True)
class ProducersAnswer:
    """What one DescribeProducers answer says about the partitions it was asked for."""

    entries: list[ProducerEntry] = field(default_factory=list)
    errors: list[tuple[TopicPartition, int]] = field(default_factory=list)
    """Partitions answered with an error code (not observed)."""
    missing: list[TopicPartition] = field(default_factory=list)
    """Partitions asked for that the answer leaves out (not observed either)."""


def parse_describe_producers(
    response: Any,
    leader_id: int,
    requested: Sequence[tuple[str, Sequence[int]]],
    *,
    open_only: bool = True,
) -> ProducersAnswer:
    """DescribeProducers answer from `leader_id` -> entries (with an open transaction only,
    unless `open_only` is False), per-partition errors and partitions left out."""
    answer = ProducersAnswer()
    append_entry = answer.entries.append
    answered: dict[str, list[int]] = {}
    for topic in response.topics:
        name = topic.name
        lean_indexes = getattr(topic, "answered_indexes", None)
        indexes = (
            [p.partition_index for p in topic.partitions]  # kafka-python keeps every partition
            if lean_indexes is None
            else lean_indexes.tolist()
        )
        answered[name] = answered[name] + indexes if name in answered else indexes
        for p in topic.partitions:
            code = p.error_code
            if code != NONE:
                answer.errors.append((TopicPartition(name, p.partition_index), code))
                continue
            for producer in p.active_producers:
                start_offset = producer.current_txn_start_offset
                if start_offset >= 0 or not open_only:
                    append_entry(
                        ProducerEntry(
                            name,
                            p.partition_index,
                            leader_id,
                            producer.producer_id,
                            producer.producer_epoch,
                            producer.coordinator_epoch,
                            start_offset,
                            producer.last_timestamp,
                        )
                    )
    for topic_name, partitions in requested:
        got = answered.get(topic_name)
        if got is not None and (got == list(partitions) or not set(partitions).difference(got)):
            continue  # brokers answer in the order asked: the list compare is the fast path
        got_set = set(got or ())
        answer.missing.extend(
            TopicPartition(topic_name, p) for p in partitions if p not in got_set
        )
    return answer


def parse_list_transactions(response: Any) -> list[tuple[str, int, str]]:
    """ListTransactions answer -> [(transactional_id, producer_id, state)] (error code 0)."""
    return [
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in response.transaction_states
    ]


def parse_describe_transactions(
    response: Any,
) -> tuple[list[TransactionDescription], list[tuple[str, int]]]:
    """DescribeTransactions answer -> (descriptions, [(transactional_id, error_code)])."""
    descriptions: list[TransactionDescription] = []
    errors: list[tuple[str, int]] = []
    for d in response.transaction_states:
        if d.error_code != NONE:
            errors.append((d.transactional_id, d.error_code))
            continue
        descriptions.append(
            TransactionDescription(
                transactional_id=d.transactional_id,
                state=d.transaction_state,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topic_partitions=frozenset(
                    TopicPartition(t.topic, p) for t in d.topics for p in t.partitions
                ),
            )
        )
    return descriptions, errors


def parse_list_offsets(response: Any) -> tuple[dict[TopicPartition, int], list[int]]:
    """ListOffsets answer -> (offset per partition answered without error, error codes)."""
    offsets: dict[TopicPartition, int] = {}
    errors: list[int] = []
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code == NONE:
                offsets[TopicPartition(topic.name, p.partition_index)] = p.offset
            else:
                errors.append(p.error_code)
    return offsets, errors

