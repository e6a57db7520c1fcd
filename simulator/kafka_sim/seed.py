"""Populate a ClusterState directly (benchmarks, tests) with states the write path produces.

Every function here leaves the logs, producer state and coordinator exactly as the equivalent
client calls would (InitProducerId, AddPartitionsToTxn, Produce), only faster and with chosen
timestamps, so that ages of hours are reachable without waiting:
- idempotent producers: one batch per partition, producer state without an open transaction;
- open transactions the coordinator tracks (Ongoing; the timeout sweep aborts them once
  start + timeout has passed, as Kafka would);
- transactions stuck in PrepareCommit/PrepareAbort because their markers cannot be delivered
  (a late `coordinator_tracked` transaction; block the leaders with `block_markers` or tick()
  delivers the markers);
- hanging transactions: data written without AddPartitionsToTxn (verification off), the
  coordinator's entry Empty with start -1 (captures 27-30), invisible to the sweep.
Seeded batches carry no bytes until a Fetch reads them (log.StoredBatch).
`seed_idle_producer_states` seeds many idle idempotent producer states per partition compactly
(log.IdleProducerBlock): the same answers as `seed_producer_states`, millions in little memory.
"""

from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafka_sim.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TxnState,
)
from kafka_sim.state import ClusterState, Partition


@dataclass(frozen=True, slots=True)
class SeededTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]
    first_offsets: tuple[int, ...]


@dataclass(slots=True)
class SeedSummary:
    idempotent_producers: int = 0
    open_transactions: list[SeededTransaction] = field(default_factory=list)
    hanging_transactions: list[SeededTransaction] = field(default_factory=list)


def _partition(state: ClusterState, topic: str, partition: int) -> Partition:
    p = state.partition(topic, partition)
    if p is None:
        raise ValueError(f"no partition {topic}-{partition}")
    return p


def _write(state: ClusterState, p: Partition, *, producer_id: int, producer_epoch: int,
           transactional: bool, records: int, timestamp_ms: int) -> int:
    log = state.log_of(p)
    entry = log.producer_entry(producer_id)
    base_sequence = entry.last_sequence + 1 if entry is not None else 0
    return log.append_seeded_batch(
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        record_count=records, base_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
        transactional=transactional, leader_epoch=p.leader_epoch,
        log_append_time=state.log_append_time(p.topic),
    )


def seed_idempotent_producer(
    state: ClusterState, topic: str, partition: int, *, timestamp_ms: int, records: int = 1,
) -> int:
    """InitProducerId (no transactional id) at the leader + one Produce; returns the pid."""
    p = _partition(state, topic, partition)
    pid = state.coordinator.producer_ids.generate(p.leader_id if p.leader_id != -1
                                                  else state.node_ids[0])
    _write(state, p, producer_id=pid, producer_epoch=0, transactional=False, records=records,
           timestamp_ms=timestamp_ms)
    return pid


def write_idempotent_batch(
    state: ClusterState, topic: str, partition: int, *, producer_id: int, timestamp_ms: int,
    records: int = 1,
) -> int:
    """One more batch from an existing idempotent producer (its next sequence): the
    partition's offsets move, its producer states stay as many. Returns the base offset."""
    return _write(state, _partition(state, topic, partition), producer_id=producer_id,
                  producer_epoch=0, transactional=False, records=records,
                  timestamp_ms=timestamp_ms)


def _new_transactional_id(state: ClusterState, transactional_id: str, timeout_ms: int,
                          now_ms: int) -> TransactionMetadata:
    """InitProducerId for a fresh transactional id: epoch 0, Empty, start -1."""
    state.ensure_internal_topic(TRANSACTION_STATE_TOPIC)
    coordinator = state.coordinator.coordinator_for(transactional_id)
    if coordinator is None:
        raise ValueError("no transaction coordinator available")
    if state.coordinator.get(transactional_id) is not None:
        raise ValueError(f"transactional id {transactional_id!r} already exists")
    if not 0 < timeout_ms <= state.transaction_max_timeout_ms:
        raise ValueError("timeout_ms must be in (0, transaction.max.timeout.ms]")
    md = TransactionMetadata(transactional_id,
                             state.coordinator.producer_ids.generate(coordinator[0]),
                             timeout_ms, now_ms)
    md.producer_epoch = 0
    state.coordinator.put(md)
    return md


def seed_open_transaction(
    state: ClusterState, transactional_id: str, partitions: Sequence[tuple[str, int]], *,
    start_ms: int, last_timestamp_ms: int | None = None, timeout_ms: int = 60000,
    records_per_partition: int = 1, txn_state: str = "Ongoing",
) -> SeededTransaction:
    """A transaction the coordinator tracks, begun at `start_ms` (AddPartitionsToTxn time).

    Each partition gets one transactional batch whose CreateTime is `last_timestamp_ms`
    (default `start_ms`). `txn_state` PrepareCommit/PrepareAbort leaves markers pending.
    """
    if txn_state not in ("Ongoing", "PrepareCommit", "PrepareAbort"):
        raise ValueError("txn_state must be Ongoing, PrepareCommit or PrepareAbort")
    md = _new_transactional_id(state, transactional_id, timeout_ms, start_ms)
    ts = start_ms if last_timestamp_ms is None else last_timestamp_ms
    firsts = []
    for topic, index in partitions:
        p = _partition(state, topic, index)
        md.topic_partitions[(topic, index)] = None
        firsts.append(_write(state, p, producer_id=md.producer_id, producer_epoch=0,
                             transactional=True, records=records_per_partition, timestamp_ms=ts))
    md.state = TxnState.ONGOING
    md.txn_start_timestamp = start_ms
    md.txn_last_update_timestamp = start_ms
    if txn_state != "Ongoing":
        # EndTxn v3 (no epoch bump): PrepareX with markers still to deliver.
        commit = txn_state == "PrepareCommit"
        md.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        md.pending_markers = dict.fromkeys(md.topic_partitions)
        state.coordinator.register_pending(md)
    return SeededTransaction(transactional_id, md.producer_id, md.producer_epoch,
                             tuple(partitions), tuple(firsts))


def seed_hanging_transaction(
    state: ClusterState, transactional_id: str, topic: str, partition: int, *,
    last_timestamp_ms: int, timeout_ms: int = 60000, records: int = 1,
) -> SeededTransaction:
    """InitProducerId + a transactional Produce never added to the transaction (27-30)."""
    md = _new_transactional_id(state, transactional_id, timeout_ms, last_timestamp_ms)
    p = _partition(state, topic, partition)
    first = _write(state, p, producer_id=md.producer_id, producer_epoch=0, transactional=True,
                   records=records, timestamp_ms=last_timestamp_ms)
    return SeededTransaction(transactional_id, md.producer_id, 0, ((topic, partition),),
                             (first,))


def seed_cluster(
    state: ClusterState, *, now_ms: int | None = None,
    idempotent_partitions: Mapping[str, int] | None = None, idempotent_max_age_ms: int = 3600000,
    open_transactions: int = 0, partitions_per_transaction: int = 2,
    open_max_age_ms: int = 30000, hanging_transactions: int = 0,
    hanging_min_age_ms: int = 3600000, hanging_max_age_ms: int = 86400000, rng_seed: int = 0,
) -> SeedSummary:
    """Bulk seeding for benchmarks.

    - every partition of `idempotent_partitions` topics (name -> how many of its partitions,
      from 0) gets an idempotent producer aged up to `idempotent_max_age_ms`;
    - `open_transactions` Ongoing transactions on random partitions, begun up to
      `open_max_age_ms` ago (keep it below their 60 s timeout, or the sweep aborts them);
    - `hanging_transactions` hanging transactions aged between the two hanging bounds.
    Transactions spread over every non-internal topic's partitions.
    """
    rng = random.Random(rng_seed)
    now = state.now_ms() if now_ms is None else now_ms
    summary = SeedSummary()
    for topic, count in (idempotent_partitions or {}).items():
        t = state.topics[topic]
        for p in t.partitions[:count]:
            seed_idempotent_producer(state, topic, p.index,
                                     timestamp_ms=now - rng.randrange(idempotent_max_age_ms))
            summary.idempotent_producers += 1
    candidates = [(t.name, len(t.partitions)) for t in state.topics.values() if not t.is_internal]
    if (open_transactions or hanging_transactions) and not candidates:
        raise ValueError("no topics to put transactions on")

    def pick() -> tuple[str, int]:
        name, n = candidates[rng.randrange(len(candidates))]
        return name, rng.randrange(n)

    for i in range(open_transactions):
        tps = list(dict.fromkeys(pick() for _ in range(partitions_per_transaction)))
        start = now - rng.randrange(max(1, open_max_age_ms))
        summary.open_transactions.append(
            seed_open_transaction(state, f"seed-open-{i}", tps, start_ms=start))
    for i in range(hanging_transactions):
        topic, index = pick()
        age = rng.randrange(hanging_min_age_ms, max(hanging_min_age_ms + 1, hanging_max_age_ms))
        summary.hanging_transactions.append(
            seed_hanging_transaction(state, f"seed-hang-{i}", topic, index,
                                     last_timestamp_ms=now - age))
    return summary


def seed_producer_states(
    state: ClusterState, topic: str, partition: int, count: int, *, now_ms: int,
    max_age_ms: int = 3600000, rng: random.Random | None = None,
) -> list[int]:
    """`count` producer states on one partition, as `count` short-lived idempotent producers
    (a batch job, a restart: each InitProducerId gives a new id) leave them: one batch each,
    last written up to `max_age_ms` ago (kept for `producer.id.expiration.ms` after that, then
    expired by the broker's periodic check, `ClusterState.tick`). Returns the ids.
    `seed_idle_producer_states` leaves the same cluster in a few bytes per state."""
    pick = rng or random.Random(0)
    return [
        seed_idempotent_producer(state, topic, partition,
                                 timestamp_ms=now_ms - pick.randrange(max(1, max_age_ms)))
        for _ in range(count)
    ]


def _draw_below(rng: random.Random, bound: int, count: int) -> array[int]:
    """`[rng.randrange(bound) for _ in range(count)]` as an array, leaving `rng` where those
    calls leave it, several times faster: for a plain `random.Random` and bound < 2**32,
    randrange takes the top k bits (k = bound's bit length) of the generator's next 32-bit
    word, again while they are >= bound (CPython's `_randbelow_with_getrandbits`). Here the
    words come in bulk (one `getrandbits(32 * n)`: n words, first word lowest) and are shifted
    and filtered in C; never more words than still-missing values, so none is drawn that the
    calls would not have drawn. Checked against randrange: tests/sim/test_idle_producer_states.py.
    """
    typecode = "I" if bound <= 2**32 else "q"
    if (type(rng) is not random.Random or bound.bit_length() > 32
            or array("I").itemsize != 4):
        return array(typecode, [rng.randrange(bound) for _ in range(count)])
    shift = 32 - bound.bit_length()
    keep = bound.__gt__
    out = array(typecode)
    while (need := count - len(out)) > 0:
        words = array("I")
        words.frombytes(rng.getrandbits(32 * need).to_bytes(4 * need, "little"))
        if sys.byteorder != "little":
            words.byteswap()
        out.extend(filter(keep, map(shift.__rrshift__, words)))
    return out


def seed_idle_producer_states(
    state: ClusterState, topic: str, partition: int, count: int, *, now_ms: int,
    max_age_ms: int = 3600000, rng: random.Random | None = None,
) -> list[range]:
    """`seed_producer_states` held compactly (log.IdleProducerBlock, a few bytes per state
    instead of ~512): the same ids from the leader's InitProducerId allocator, the same
    timestamps from `rng` (left in the same state), the same offsets, and the same answers to
    DescribeProducers, ListOffsets, Fetch and producer expiration. A later write by one of these
    ids (`write_idempotent_batch`, a Produce or marker naming it) moves its state out of the
    block first, so it continues as the explicit seeding's would. Returns the ids as runs."""
    if count <= 0:
        return []
    p = _partition(state, topic, partition)
    leader = p.leader_id if p.leader_id != -1 else state.node_ids[0]
    runs = state.coordinator.producer_ids.generate_many(leader, count)
    ages = _draw_below(rng or random.Random(0), max(1, max_age_ms), count)
    state.log_of(p).append_idle_producer_states(
        runs=runs, ages=ages, now_ms=now_ms, leader_epoch=p.leader_epoch,
        log_append_time=state.log_append_time(p.topic))
    return runs


def skewed_state_counts(
    partitions: Sequence[tuple[str, int]], mean_states: float, *, hot_fraction: float = 0.1,
    rng: random.Random | None = None,
) -> dict[tuple[str, int], int]:
    """Producer states per partition averaging `mean_states`, skewed as on a real cluster:
    `hot_fraction` of the partitions (whole topics first: hot topics) hold 90% of the states,
    the rest share 10% (most of them none when the mean is small). Only partitions with at
    least one state are in the result."""
    pick = rng or random.Random(0)
    hot_n = max(1, round(len(partitions) * hot_fraction))
    hot, cold = partitions[:hot_n], partitions[hot_n:]
    total = round(mean_states * len(partitions))
    counts: dict[tuple[str, int], int] = {}

    def spread(targets: Sequence[tuple[str, int]], states: int) -> None:
        if not targets or states <= 0:
            return
        each, extra = divmod(states, len(targets))
        for i, tp in enumerate(pick.sample(list(targets), len(targets))):
            n = each + (1 if i < extra else 0)
            if n:
                counts[tp] = counts.get(tp, 0) + n

    spread(hot, total - total // 10 if cold else total)
    spread(cold, total // 10 if cold else 0)
    return counts
