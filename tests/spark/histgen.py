"""Generated poll histories: sequences of ClusterObservations with transactions that open,
stay open across polls (some long enough to be late, some hanging), and end; polls where the
cluster is down or a partition is unobserved (its transactions unknown, not ended).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from exporter.model import (
    BrokerStatus,
    ClusterObservation,
    OpenTransaction,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
)
from exporter.settings import ClusterSettings

DAY_MS = 86_400_000
BASE_MS = 1_795_132_800_000 + DAY_MS - 5 * 60_000  # 5 min before a UTC midnight
TOPICS = ("orders", "payments")


@dataclass(frozen=True)
class TxnPlan:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    age_at_first_ms: int
    first_poll: int
    last_poll: int
    transactional_id: str | None
    tracked: bool  # coordinator's description lists the partition


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    interval_ms: int
    polls: int
    down: frozenset[int]
    unobserved: frozenset[tuple[int, str, int]]
    txns: tuple[TxnPlan, ...]
    complete: bool
    settings: ClusterSettings


def observations(plan: ClusterPlan) -> list[ClusterObservation]:
    result = []
    for i in range(plan.polls):
        now = BASE_MS + i * plan.interval_ms
        if i in plan.down:
            result.append(ClusterObservation(
                cluster=plan.name, observed_at_ms=now,
                brokers=(BrokerStatus(1, False, "down"),), leaders={}, open_transactions=(),
                coordinator_view_complete=False,
            ))
            continue
        unobserved = {
            TopicPartition(t, p): "NOT_LEADER_OR_FOLLOWER"
            for (j, t, p) in plan.unobserved if j == i
        }
        opened: list[OpenTransaction] = []
        for x in plan.txns:
            if not x.first_poll <= i <= x.last_poll:
                continue
            if TopicPartition(x.topic, x.partition) in unobserved:
                continue
            start = BASE_MS + x.first_poll * plan.interval_ms - x.age_at_first_ms
            opened.append(OpenTransaction(
                topic=x.topic, partition=x.partition, leader_id=1 + x.partition % 2,
                producer_id=x.producer_id, producer_epoch=x.producer_epoch, coordinator_epoch=0,
                current_txn_start_offset=x.start_offset, last_timestamp_ms=start,
                start_time_ms=start, start_time_source=StartTimeSource.BATCH_TIMESTAMP,
            ))
        ids = {x.producer_id: x.transactional_id for x in plan.txns if x.transactional_id}
        descriptions: dict[str, TransactionDescription | None] = {}
        for x in plan.txns:
            if x.transactional_id:
                descriptions[x.transactional_id] = TransactionDescription(
                    x.transactional_id, "Ongoing", 60_000, 0, x.producer_id, x.producer_epoch,
                    frozenset({TopicPartition(x.topic, x.partition)} if x.tracked else ()),
                )
        leaders = {TopicPartition(t, p): 1 + p % 2 for t in TOPICS for p in range(3)}
        result.append(ClusterObservation(
            cluster=plan.name, observed_at_ms=now,
            brokers=(BrokerStatus(1, True, None, 60_000), BrokerStatus(2, True, None, 60_000)),
            leaders=leaders, open_transactions=tuple(opened), unobserved=unobserved,
            transactional_ids=ids, descriptions=descriptions,
            coordinator_view_complete=plan.complete,
        ))
    return result


@st.composite
def txn_plans(draw: st.DrawFn, polls: int, producer_id: int) -> TxnPlan:
    first = draw(st.integers(0, polls - 1))
    last = draw(st.integers(first, polls - 1))
    tid = draw(st.sampled_from([None, f"tx-{producer_id}", "shared-id"]))
    return TxnPlan(
        topic=draw(st.sampled_from(TOPICS)), partition=draw(st.integers(0, 2)),
        producer_id=producer_id, producer_epoch=draw(st.integers(0, 1)),
        start_offset=draw(st.integers(0, 3)) * 10,
        age_at_first_ms=draw(st.integers(0, 600_000)),
        first_poll=first, last_poll=last, transactional_id=tid, tracked=draw(st.booleans()),
    )


@st.composite
def cluster_plans(draw: st.DrawFn, name: str) -> ClusterPlan:
    polls = draw(st.integers(2, 8))
    n_txns = draw(st.integers(0, 6))
    txns = tuple(draw(txn_plans(polls, 100 + k)) for k in range(n_txns))
    down = frozenset(draw(st.sets(st.integers(0, polls - 1), max_size=2)))
    unobserved = frozenset(draw(st.sets(
        st.tuples(st.integers(0, polls - 1), st.sampled_from(TOPICS), st.integers(0, 2)),
        max_size=3,
    )))
    settings = ClusterSettings(
        name=name, bootstrap_servers=("127.0.0.1:9092",),
        late_buffer_seconds=draw(st.sampled_from([0.0, 60.0, 300.0])),
        min_reported_duration_seconds=draw(st.sampled_from([0.0, 60.0])),
    )
    return ClusterPlan(
        name=name, interval_ms=draw(st.sampled_from([20_000, 30_000, 90_000])), polls=polls,
        down=down, unobserved=unobserved, txns=txns, complete=draw(st.booleans()),
        settings=settings,
    )


fleet_plans = st.tuples(cluster_plans("eu:prod"), cluster_plans("1"))
"""Two clusters; names that need escaping (':') or look numeric ("1") in partition paths."""
